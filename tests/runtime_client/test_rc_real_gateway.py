"""runtime_client against the real gateway (gateway.testing.start_gateway, demo config),
over a real socket on 127.0.0.1 port 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime_client import (
    AgentState, Answer, Refused, AsyncGatewayClient, AuthenticationError, Observation,
    StopReason, ToolCall, ToolCalls, TrajectoryEval, TransportError, replay, resume, run_agent,
)
from runtime_client.testing import scripted_decide

gateway_testing = pytest.importorskip("gateway.testing")

from tests.approvals.approval_helpers import private_demo_keys  # noqa: E402
from tests.conftest import real_gateway_client  # noqa: E402

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "toolgate.yaml"
AGENT_KEY = "demo-agent-key"


@pytest.fixture
async def real(tmp_path):
    async with real_gateway_client(DEMO_CONFIG, data_dir=tmp_path / "data") as client:
        yield client


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


ROOT = DEMO_CONFIG.parents[1]


async def approve_with_cli(address: str, approval_id: str, keys: Path, approver: str = "alice") -> str:
    """`toolgate approvals approve` in another process, as an approver would run it, with the
    demo key in ``keys`` (``private_demo_keys``)."""
    import asyncio
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "approvals", "approve", approval_id,
        "--key", str(keys / f"{approver}.pem"),
        "--api-key", f"{approver}-approver-key", "--target", address,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=ROOT)
    out, _ = await asyncio.wait_for(proc.communicate(b"y\n"), 60)  # reads the request, answers yes
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_write_approved_by_cli_then_resume_executes_exactly_once(tmp_path, checkpoints):
    running = await gateway_testing.start_gateway(DEMO_CONFIG, data_dir=tmp_path / "data")
    client = AsyncGatewayClient(running.address, api_key=AGENT_KEY)
    try:
        write = ToolCall("write_file", {"path": "notes.txt", "content": "approved text"})
        paused = await run_agent(AgentState(goal="write"), scripted_decide(write, Answer("ok")), client,
                                 checkpoints=checkpoints)
        assert paused.stop_reason is StopReason.AWAITING_APPROVAL
        approval_id = paused.state.pending_approvals[0].approval_id
        await approve_with_cli(running.address, approval_id, private_demo_keys(tmp_path / "keys"))
        approval = await client.wait_for_approval(approval_id, timeout=10)
        assert approval.status == "approved" and approval.grant
        done = await resume(paused.state.run_id, scripted_decide(Answer("written")), client,
                            checkpoints=checkpoints)
        assert done.stop_reason is StopReason.SUCCESS, done.state.observations
        assert done.state.tools_called == ["write_file"]
        read = await client.execute("read_file", {"path": "notes.txt"})
        assert read.outcome.data["content"] == "approved text" if isinstance(read.outcome.data, dict) \
            else "approved text" in str(read.outcome.data)
        assert (await client.get_approval(approval_id)).status == "executed"
        # replaying the grant never re-executes (DESIGN: stored outcome marked replayed; the
        # gateway currently answers a refusal instead — either way, no second execution)
        again = await client.execute("write_file", write.input, approval_grant=approval.grant)
        assert again.replayed or isinstance(again.outcome, Refused)
        twice = await resume(paused.state.run_id, scripted_decide(Answer("x")), client, checkpoints=checkpoints)
        assert twice.state == done.state
        assert TrajectoryEval(required_tools=("write_file",), expected_stop_reason="success",
                              max_steps=2).evaluate(done.state).passed
    finally:
        await client.close()
        await running.stop()
