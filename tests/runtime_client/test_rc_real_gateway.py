"""runtime_client against the real gateway (gateway.testing.start_gateway, demo config),
over a real socket on 127.0.0.1 port 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime_client import (
    AgentState, Answer, ApprovalRequired, AsyncGatewayClient, AuthenticationError, Observation,
    StopReason, ToolCall, ToolCalls, TrajectoryEval, TransportError, replay, resume, run_agent,
)
from runtime_client.testing import scripted_decide

gateway_testing = pytest.importorskip("gateway.testing")

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "toolgate.yaml"
AGENT_KEY = "demo-agent-key"


@pytest.fixture
async def real(tmp_path):
    running = await gateway_testing.start_gateway(DEMO_CONFIG, data_dir=tmp_path / "data")
    client = AsyncGatewayClient(running.address, api_key=AGENT_KEY)
    try:
        yield client
    finally:
        await client.close()
        await running.stop()


async def test_lists_demo_tools_with_risk(real):
    tools = {t.name: t for t in await real.list_tools()}
    assert {"read_file", "lookup_policy", "write_file", "delete_file"} <= set(tools)
    assert tools["lookup_policy"].read_only and not tools["write_file"].read_only
    assert tools["read_file"].input_schema["required"] == ["path"]


async def test_wrong_key_is_an_authentication_error(tmp_path):
    running = await gateway_testing.start_gateway(DEMO_CONFIG, data_dir=tmp_path / "data")
    try:
        async with AsyncGatewayClient(running.address, api_key="nope") as client:
            with pytest.raises(AuthenticationError):
                await client.list_tools()
    finally:
        await running.stop()


async def test_policy_read_trajectory_on_real_gateway(real, tmp_path):
    decide = scripted_decide(ToolCall("lookup_policy", {"topic": "refunds"}), Answer("see policy"))
    result = await run_agent(AgentState(goal="refund policy?"), decide, real, checkpoints=None)
    assert result.stop_reason is StopReason.SUCCESS and result.state.steps == 2
    assert result.state.tools_called == ["lookup_policy"]
    assert [e.type for e in result.trace] == ["context_built", "decision", "policy_decision",
                                              "tool_result", "context_built", "decision", "stop"]
    tool_obs = [o for o in result.state.observations if o.kind == "tool"][0]
    assert tool_obs.trust == "untrusted" and "Refunds" in tool_obs.data["text"]
    assert tool_obs.decision_id
    assert TrajectoryEval(required_tools=("lookup_policy",), forbidden_tools=("write_file",),
                          expected_stop_reason="success", max_steps=2).evaluate(result.state).passed
    assert replay(result.events) == result.state


async def test_destructive_call_refused_by_real_policy(real):
    result = await run_agent(AgentState(goal="rm"), lambda s: ToolCall("delete_file", {"path": "x"}),
                             real, checkpoints=None)
    assert result.stop_reason is StopReason.REFUSED
    assert result.state.observations[-1].code == "policy_denied"


async def test_unknown_tool_refused_by_real_gateway(real):
    result = await run_agent(AgentState(goal="x"), lambda s: ToolCall("format_disk", {}), real,
                             checkpoints=None)
    assert result.stop_reason is StopReason.REFUSED
    assert result.state.observations[-1].code == "unknown_tool"


async def test_write_pauses_for_approval_on_real_gateway(real, checkpoints):
    write = ToolCall("write_file", {"path": "notes.txt", "content": "hi"})
    result = await run_agent(AgentState(goal="write"), scripted_decide(write, Answer("ok")), real,
                             checkpoints=checkpoints)
    assert result.stop_reason is StopReason.AWAITING_APPROVAL
    [pending] = result.state.pending_approvals
    assert pending.approval_id and pending.tool == "write_file"
    # nothing executed: reading the file back fails
    read = await real.execute("read_file", {"path": "notes.txt"})
    assert not (isinstance(read.outcome, Observation) and read.outcome.ok)
    # resume without an approval leaves the run waiting (or, before the Approvals service
    # exists, surfaces the transport error as an exception)
    try:
        still = await resume(result.state.run_id, scripted_decide(Answer("ok")), real, checkpoints=checkpoints)
    except TransportError as exc:
        pytest.skip(f"Approvals service not available yet: {exc}")
    assert still.stop_reason is StopReason.AWAITING_APPROVAL


async def test_parallel_reads_on_real_gateway(real):
    calls = ToolCalls(tuple(ToolCall("lookup_policy", {"topic": t}) for t in ("refunds", "writes", "secrets")))
    result = await run_agent(AgentState(goal="x"), scripted_decide(calls, Answer("ok")), real, checkpoints=None)
    assert result.stop_reason is StopReason.SUCCESS
    assert [o.data["topic"] for o in result.state.observations if o.kind == "tool"] == ["refunds", "writes", "secrets"]
