"""The adapters turn a call the gateway could not answer (it is down, the API key is rejected, the
answer was lost) into their framework's tool-error form with a stable code, and remember approvals
by the arguments' RFC 8785 canonical form, as the gateway hashes them. Real gateway (demo config
plus test tools) on 127.0.0.1 port 0; MCP both in-process and over stdio."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from runtime_client import AsyncGatewayClient
from runtime_client._types import Risk, ToolSpec
from runtime_client.adapters import ApprovalMemory
from tests.conftest import AGENT_KEY, ROOT
from tests.runtime_client.test_rc_adapter_approvals import (  # noqa: F401
    ADAPTERS, APPROVAL_ID, ARGS, approve, executions, real,
)
from tests.runtime_client.test_rc_adapter_retries import COUNTED, lossy  # noqa: F401
from tests.runtime_client.test_rc_adapter_retries import executions as calls_counted

LOOKUP = ToolSpec("lookup_policy", "policies", {
    "type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}, Risk("read"))


@pytest.fixture(params=["unavailable", "unauthenticated"])
async def broken(request, running):
    """A client whose calls fail: the gateway is gone, or it rejects the API key."""
    address = running.address
    if request.param == "unavailable":
        await running.stop()
    client = AsyncGatewayClient(address, api_key=AGENT_KEY if request.param == "unavailable" else "wrong-key",
                                timeout=5)
    try:
        yield request.param, client, address
    finally:
        await client.close()


async def test_langchain_returns_a_gateway_failure_as_a_tool_error(broken):
    from langchain_core.messages import ToolMessage

    from runtime_client.adapters.langchain import langchain_tool

    code, client, _ = broken
    tool = langchain_tool(client, LOOKUP)
    text = await tool.ainvoke({"topic": "refunds"})
    assert text.startswith(f"gateway error ({code}): ")
    message = await tool.ainvoke({"name": "lookup_policy", "args": {"topic": "refunds"}, "id": "c1",
                                  "type": "tool_call"})
    assert isinstance(message, ToolMessage) and message.status == "error"
    assert message.content.startswith(f"gateway error ({code}): ") and message.tool_call_id == "c1"


async def test_openai_agents_returns_a_gateway_failure_as_error_text(broken):
    from agents.tool_context import ToolContext

    from runtime_client.adapters.openai_agents import function_tool

    code, client, _ = broken
    args = '{"topic": "refunds"}'
    ctx = ToolContext(context=None, tool_name="lookup_policy", tool_call_id="call_1", tool_arguments=args)
    text = await function_tool(client, LOOKUP).on_invoke_tool(ctx, args)
    assert text.startswith(f"gateway error ({code}): ")
    assert ("API key" in text) if code == "unauthenticated" else ("could not be reached" in text)


async def test_mcp_in_process_returns_a_failed_call_as_a_tool_error_and_names_a_failed_listing(broken):
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from runtime_client.adapters.mcp import mcp_server

    code, client, _ = broken
    async with Client(mcp_server(client)) as mcp_client:
        with pytest.raises(MCPError) as listed:
            await mcp_client.list_tools()
        result = await mcp_client.call_tool("lookup_policy", {"topic": "refunds"})
    assert listed.value.message != "Internal server error"
    assert listed.value.message.startswith(f"cannot list the gateway's tools: gateway error ({code})")
    assert listed.value.data == {"toolgate/code": code}
    assert result.is_error and result.meta["toolgate/code"] == code
    assert result.content[0].text.startswith(f"gateway error ({code}): ")


STDIO_SERVER = textwrap.dedent("""
    import sys
    import anyio
    from mcp.server.stdio import stdio_server
    from runtime_client import AsyncGatewayClient
    from runtime_client.adapters.mcp import mcp_server

    async def main():
        async with AsyncGatewayClient(sys.argv[1], api_key=sys.argv[2], timeout=5) as gw:
            server = mcp_server(gw)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
""")


async def test_mcp_over_stdio_returns_a_failed_call_as_a_tool_error_without_tracebacks(broken, tmp_path):
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.shared.exceptions import MCPError

    code, _, address = broken
    script = tmp_path / "server.py"
    script.write_text(STDIO_SERVER)
    key = AGENT_KEY if code == "unavailable" else "wrong-key"
    params = StdioServerParameters(command=sys.executable, args=[str(script), address, key],
                                   cwd=str(ROOT), env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                with pytest.raises(MCPError) as listed:
                    await session.list_tools()
                result = await session.call_tool("lookup_policy", {"topic": "refunds"})
    assert listed.value.message.startswith(f"cannot list the gateway's tools: gateway error ({code})")
    assert result.is_error and (result.meta or {}).get("toolgate/code") == code
    assert result.content[0].text.startswith(f"gateway error ({code}): ")
    logged = errlog.read_text()
    assert "Traceback" not in logged and "AioRpcError" not in logged, logged


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_a_lost_answer_is_a_tool_error_and_its_retry_replays_the_outcome(lossy, adapter):  # noqa: F811
    running, client, transport = lossy
    async with ADAPTERS[adapter](client) as invoke:
        lost = await invoke("count_call", COUNTED)
        assert lost.startswith("gateway error (deadline_exceeded): ") and "same idempotency key" in lost
        assert calls_counted(running) == 1
        retried = await invoke("count_call", COUNTED)
        assert retried.startswith('<tool_output tool="count_call"'), retried
        assert calls_counted(running) == 1
    first, retry = transport.keys
    assert first and retry == first


def test_the_approval_key_is_the_gateways_canonical_form_of_the_arguments():
    from gateway.arguments import canonical_json

    key = ApprovalMemory.key
    assert key("r", "refund", {"amount": 400}) == key("r", "refund", {"amount": 400.0})
    assert key("r", "t", {"a": -0.0}) == key("r", "t", {"a": 0})
    assert key("r", "t", {"b": 1e21, "a": 1.5}) != key("r", "t", {"b": 1e21, "a": 1.25})
    for args in [{"amount": 400.0, "order_id": "N-7"}, {"x": [1.0, 2.5, 1e21, "é"]}, {"𝄞": 1, "z": 0.1}]:
        assert key("r", "t", args)[2].encode() == canonical_json(args)
    assert key("r", "t", {"a": 10**20}) == key("r", "t", {"a": 1e20})  # the gateway takes it as that double
    assert key("r", "t", {"a": 10**20 + 1}) is None  # the gateway refuses it
    assert key("r", "t", {"a": float("nan")}) is None


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_an_approved_call_retried_with_an_equal_number_written_otherwise_runs_once(real, adapter):  # noqa: F811
    running, client = real
    async with ADAPTERS[adapter](client) as invoke:
        first = await invoke("count_write", ARGS)
        approval_id = APPROVAL_ID.search(first).group(1)
        await approve(running.address, approval_id)
        same = {**ARGS, "n": float(ARGS["n"])}  # 1.0: one value, one args hash, at the gateway
        ran = await invoke("count_write", same)
        assert ran.startswith('<tool_output tool="count_write"'), ran
    assert executions(running) == 1
    assert json.dumps(same) != json.dumps(ARGS)


def test_a_client_closed_under_a_call_is_not_told_as_a_call_that_did_not_run() -> None:
    """A client closed while a call is on its way may have sent it, and the gateway runs a call
    to its end after its caller goes: the model must not be told the side effect did not happen."""
    from runtime_client import ClientClosedError
    from runtime_client.adapters import error_text

    said = error_text(ClientClosedError("the client was closed")).text
    assert "NOT executed" not in said and "may have run" in said and "same idempotency key" in said
