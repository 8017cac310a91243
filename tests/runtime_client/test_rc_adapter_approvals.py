"""An approval-gated tool runs through each adapter: the call pauses for approval, an approver
approves through the real Approvals service, and the same call with the same arguments runs
exactly once. Real gateway (demo config plus a counting write tool) on 127.0.0.1 port 0."""

from __future__ import annotations

import json
import re
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
import yaml

from runtime_client import ApprovalRequired, AsyncGatewayClient, Observation, Refused, ToolResult
from runtime_client.adapters import ApprovalMemory, call_text
from runtime_client.adapters._common import MAX_REMEMBERED_APPROVALS

gateway_testing = pytest.importorskip("gateway.testing")

from gateway._proto.toolgate.v1 import gateway_pb2 as pb  # noqa: E402
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc  # noqa: E402
from gateway.approvals import tokens  # noqa: E402
from gateway.approvals.keyring import SigningKey, key_labels, load_private_key  # noqa: E402
from tests.conftest import AGENT_KEY, DEMO_CONFIG, ROOT, TEST_TOOLS, demo_config  # noqa: E402

COUNT_WRITE = {
    "name": "count_write",
    "description": "a write tool that records each execution",
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}, "path": {"type": "string"}}},
    "risk": {"side_effect": "write"},
    "executor": {"kind": "python", "callable": "gateway.testing:count_call"},
}
ARGS = {"path": "out.txt", "n": 1}
OTHER_ARGS = {"path": "out.txt", "n": 2}
APPROVAL_ID = re.compile(r"approval required \(approval_id=([^)]+)\)")


@pytest.fixture
async def real(tmp_path):
    tools = yaml.safe_load(DEMO_CONFIG.read_text())["tools"] + TEST_TOOLS + [COUNT_WRITE]
    running = await gateway_testing.start_gateway(demo_config(tmp_path, tools=tools))
    client = AsyncGatewayClient(running.address, api_key=AGENT_KEY)
    try:
        yield running, client
    finally:
        await client.close()
        await running.stop()


async def approve(address: str, approval_id: str, approver: str = "alice") -> None:
    """Sign the request as ``approver`` (demo key) and submit it to the Approvals service."""
    assert await vote(address, approval_id, approver) == "approved"


async def vote(address: str, approval_id: str, approver: str, reject: str = "") -> str:
    """``approver`` (demo key) approves the request, or rejects it for the reason ``reject``,
    through the Approvals service; the request's status after."""
    pem = (ROOT / "examples" / "keys" / f"{approver}.pem").read_bytes()
    key = SigningKey(key_labels(pem)["kid"], load_private_key(pem))
    metadata = (("x-api-key", f"{approver}-approver-key"),)
    async with grpc.aio.insecure_channel(address) as channel:
        approvals = pb_grpc.ApprovalsStub(channel)
        a = await approvals.Get(pb.GetApprovalRequest(approval_id=approval_id), metadata=metadata, timeout=10)
        now = int(time.time())
        claims = {"iss": approver, "sub": a.approval_id, "aud": a.audience, "tool": a.tool,
                  "args_hash": a.args_hash, "tenant": a.tenant, "run_id": a.run_id, "iat": now,
                  "exp": now + 300, "jti": str(uuid.uuid4()), **({"reason": reject} if reject else {})}
        if reject:
            token = tokens.sign(claims, key, tokens.TYP_REJECTION)
            out = await approvals.Reject(pb.RejectApprovalRequest(approval_id=approval_id, token=token),
                                         metadata=metadata, timeout=10)
        else:
            token = tokens.sign(claims, key, tokens.TYP_APPROVAL)
            out = await approvals.Submit(pb.SubmitApprovalRequest(approval_id=approval_id, token=token),
                                         metadata=metadata, timeout=10)
    return out.status


@asynccontextmanager
async def langchain_invoke(client):
    from runtime_client.adapters.langchain import langchain_tools

    tools = {t.name: t for t in await langchain_tools(client)}

    async def invoke(name: str, args: dict) -> str:
        return await tools[name].ainvoke(args)

    yield invoke


@asynccontextmanager
async def openai_agents_invoke(client):
    from agents.tool_context import ToolContext

    from runtime_client.adapters.openai_agents import function_tools

    tools = {t.name: t for t in await function_tools(client)}

    async def invoke(name: str, args: dict) -> str:
        text = json.dumps(args)
        ctx = ToolContext(context=None, tool_name=name, tool_call_id="call_1", tool_arguments=text)
        return await tools[name].on_invoke_tool(ctx, text)

    yield invoke


@asynccontextmanager
async def mcp_invoke(client):
    from mcp import Client

    from runtime_client.adapters.mcp import mcp_server

    async with Client(mcp_server(client)) as mcp_client:
        async def invoke(name: str, args: dict) -> str:
            return (await mcp_client.call_tool(name, args)).content[0].text

        yield invoke


ADAPTERS = {"langchain": langchain_invoke, "openai_agents": openai_agents_invoke, "mcp": mcp_invoke}


def executions(running) -> int:
    return gateway_testing.calls_recorded(Path(running.app.config.data_path) / "sandbox", "count_write")


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_adapter_retry_after_approval_runs_the_approved_call_once(real, adapter):
    running, client = real
    async with ADAPTERS[adapter](client) as invoke:
        first = await invoke("count_write", ARGS)
        match = APPROVAL_ID.match(first)
        assert match, first
        assert "same call with the same arguments will proceed" in first
        approval_id = match.group(1)
        pending = await invoke("count_write", ARGS)  # asked again before approval: still waits
        assert pending.startswith("approval still pending") and approval_id in pending, pending
        assert executions(running) == 0

        await approve(running.address, approval_id)
        other = await invoke("count_write", OTHER_ARGS)  # other arguments: not this approval
        assert APPROVAL_ID.match(other) and approval_id not in other, other
        assert executions(running) == 0

        done = await invoke("count_write", dict(reversed(ARGS.items())))  # same call, keys reordered
        assert done.startswith('<tool_output tool="count_write" trust="untrusted">'), done
        assert executions(running) == 1
        assert (await client.get_approval(approval_id)).status == "executed"
        again = await invoke("count_write", ARGS)  # the approval was used: a new request, no run
        assert APPROVAL_ID.match(again) and approval_id not in again, again
        assert executions(running) == 1


async def mcp_call(session, args: dict = ARGS) -> str:
    return (await session.call_tool("count_write", args)).content[0].text


async def test_mcp_sessions_each_get_their_own_approvals_and_run_id(real):
    """Two MCP sessions on one server: A's approval is not presented by B's identical call."""
    from mcp import Client

    from runtime_client.adapters.mcp import mcp_server

    running, client = real
    server = mcp_server(client)
    async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
        a_id = APPROVAL_ID.match(await mcp_call(a)).group(1)
        await approve(running.address, a_id)

        b_first = await mcp_call(b)  # identical call, other session: asks for its own approval
        b_match = APPROVAL_ID.match(b_first)
        assert b_match and b_match.group(1) != a_id, b_first
        assert executions(running) == 0

        done = await mcp_call(a)  # A's retry presents A's approval and runs
        assert done.startswith('<tool_output tool="count_write" trust="untrusted">'), done
        assert executions(running) == 1
        pending = await mcp_call(b)  # B's own approval is still pending
        assert pending.startswith("approval still pending") and executions(running) == 1, pending

    a_run, b_run = [(await client.get_approval(i)).run_id for i in (a_id, b_match.group(1))]
    assert a_run and b_run and a_run != b_run


async def test_mcp_run_id_given_is_shared_by_every_session(real):
    from mcp import Client

    from runtime_client.adapters.mcp import mcp_server

    running, client = real
    server = mcp_server(client, run_id="shared-run")
    async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
        a_id = APPROVAL_ID.match(await mcp_call(a)).group(1)
        await approve(running.address, a_id)
        done = await mcp_call(b)  # the caller chose to share: B presents A's approval
        assert done.startswith('<tool_output tool="count_write"'), done
        assert executions(running) == 1
    assert (await client.get_approval(a_id)).run_id == "shared-run"


def _result(outcome, tool: str = "t") -> ToolResult:
    code = outcome.code if isinstance(outcome, Refused) else "approval_required"
    return ToolResult(tool, outcome, code)


def test_approval_memory_is_bounded_dropping_the_oldest():
    memory = ApprovalMemory()
    keys = [memory.key("", "t", {"i": i}) for i in range(MAX_REMEMBERED_APPROVALS + 1)]
    for i, key in enumerate(keys):
        memory.update(key, _result(ApprovalRequired(f"apr-{i}")))
    assert len(memory) == MAX_REMEMBERED_APPROVALS
    assert memory.get(keys[0]) == ""
    assert memory.get(keys[1]) == "apr-1" and memory.get(keys[-1]) == f"apr-{MAX_REMEMBERED_APPROVALS}"


def test_approval_memory_keeps_a_pending_entry_and_forgets_it_on_any_other_outcome():
    memory = ApprovalMemory()
    key = memory.key("run", "t", {"b": 1, "a": [1, 2]})
    assert key == memory.key("run", "t", {"a": [1, 2], "b": 1})
    assert key != memory.key("other-run", "t", {"a": [1, 2], "b": 1})
    memory.update(key, _result(ApprovalRequired("apr-1")))
    memory.update(key, _result(Refused("approval_pending", ("still pending",))))
    assert memory.get(key) == "apr-1"
    memory.update(key, _result(Refused("approval_expired")))
    assert memory.get(key) == ""
    memory.update(key, _result(ApprovalRequired("apr-2")))
    memory.update(key, _result(Observation("ok", data={})))
    assert memory.get(key) == ""


def test_approval_required_text_says_the_same_call_proceeds_once_approved():
    text = call_text(_result(ApprovalRequired("apr-9", approver_groups=("ops",)))).text
    assert text.startswith("approval required (approval_id=apr-9): waiting for ops.")
    assert "NOT executed" in text and "the same call with the same arguments will proceed" in text


async def test_fake_gateway_answers_a_retry_of_a_pending_approval_as_the_gateway_does(fake):
    async with langchain_invoke(fake.async_client()) as invoke:
        args = {"path": "n.txt", "content": "hi"}
        approval_id = APPROVAL_ID.match(await invoke("write_file", args)).group(1)
        assert (await invoke("write_file", args)).startswith("approval still pending")
        fake.approve(approval_id)
        assert (await invoke("write_file", args)).startswith('<tool_output tool="write_file"')
    assert len(fake.executions("write_file")) == 1
