"""LangChain, OpenAI Agents SDK and MCP adapters each invoke a gateway tool: the in-memory
fake, and the real gateway (demo config) over a socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime_client import AsyncGatewayClient

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "toolgate.yaml"


@pytest.fixture(params=["fake", "real"])
async def client(request, fake, tmp_path):
    if request.param == "fake":
        yield fake.async_client()
        return
    gateway_testing = pytest.importorskip("gateway.testing")
    running = await gateway_testing.start_gateway(DEMO_CONFIG, data_dir=tmp_path / "data")
    c = AsyncGatewayClient(running.address, api_key="demo-agent-key")
    try:
        yield c
    finally:
        await c.close()
        await running.stop()


def _payload(text: str) -> dict:
    assert text.startswith('<tool_output tool="lookup_policy" trust="untrusted">')
    return json.loads(text.split("\n", 1)[1].rsplit("\n", 1)[0])


async def test_langchain_tool_invokes_gateway(client):
    from runtime_client.adapters.langchain import langchain_tools

    tools = {t.name: t for t in await langchain_tools(client)}
    lookup = tools["lookup_policy"]
    assert lookup.args_schema["required"] == ["topic"]
    assert lookup.metadata["read_only"] is True
    out = await lookup.ainvoke({"topic": "refunds"})
    assert _payload(out)["topic"] == "refunds"
    denied = await tools["delete_file"].ainvoke({"path": "x"})
    assert denied.startswith("refused (policy_denied)")


async def test_openai_agents_function_tool_invokes_gateway(client):
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from runtime_client.adapters.openai_agents import function_tools

    tools = {t.name: t for t in await function_tools(client)}
    lookup = tools["lookup_policy"]
    assert isinstance(lookup, FunctionTool)
    assert lookup.params_json_schema["properties"]["topic"]
    args = '{"topic": "refunds"}'
    ctx = ToolContext(context=None, tool_name="lookup_policy", tool_call_id="call_1", tool_arguments=args)
    out = await lookup.on_invoke_tool(ctx, args)
    assert _payload(out)["topic"] == "refunds"
    dup = '{"topic": "refunds", "topic": "writes"}'
    assert (await lookup.on_invoke_tool(ctx, dup)).startswith("refused (invalid_arguments)")


async def test_mcp_client_lists_and_calls_gateway_tools(client):
    from mcp import Client

    from runtime_client.adapters.mcp import mcp_server

    async with Client(mcp_server(client)) as mcp_client:
        listed = {t.name: t for t in (await mcp_client.list_tools()).tools}
        assert listed["lookup_policy"].annotations.read_only_hint is True
        assert listed["delete_file"].annotations.destructive_hint is True
        result = await mcp_client.call_tool("lookup_policy", {"topic": "refunds"})
        assert not result.is_error
        assert _payload(result.content[0].text)["topic"] == "refunds"
        denied = await mcp_client.call_tool("delete_file", {"path": "x"})
        assert denied.is_error and "policy_denied" in denied.content[0].text


async def test_mcp_approval_required_is_a_tool_error_the_client_can_show(client):
    from mcp import Client

    from runtime_client.adapters.mcp import mcp_server

    async with Client(mcp_server(client)) as mcp_client:
        result = await mcp_client.call_tool("write_file", {"path": "n.txt", "content": "hi"})
    assert result.is_error
    text = result.content[0].text
    assert text.startswith("approval required (approval_id=") and "NOT executed" in text
