"""MCP front door: an MCP server whose tools are the gateway's (``toolgate[mcp]``).

Any MCP client can list and call gateway tools through it; each call goes through the
gateway. Approval-required, refusals and evidence requests come back as MCP tool errors
(``isError=True``) with text the client can show, and the outcome code in ``_meta``.
The server keeps an ``ApprovalMemory``: the same call with the same arguments, made again
once approved, presents its approval and runs.
"""

from __future__ import annotations

from typing import Any

try:
    from mcp import types
    from mcp.server import Server
except ImportError as exc:  # pragma: no cover
    raise ImportError("runtime_client.adapters.mcp needs mcp: pip install 'toolgate[mcp]'") from exc

from runtime_client._client import AsyncGatewayClient
from runtime_client._types import ToolSpec
from runtime_client.adapters._common import ApprovalMemory, call_text, execute


def _mcp_tool(spec: ToolSpec) -> types.Tool:
    annotations = types.ToolAnnotations(
        readOnlyHint=spec.read_only, destructiveHint=spec.risk.side_effect == "destructive")
    return types.Tool(name=spec.name, description=spec.description, inputSchema=spec.input_schema,
                      annotations=annotations)


def mcp_server(client: AsyncGatewayClient, *, name: str = "toolgate", run_id: str = "") -> Server[Any]:
    """An MCP ``Server``; run it over stdio/HTTP, or pass it to ``mcp.Client`` in-process."""
    memory = ApprovalMemory()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_mcp_tool(t) for t in await client.list_tools()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        result = await execute(client, memory, params.name, args, run_id=run_id)
        text = call_text(result)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text.text)], isError=text.is_error,
            _meta={"toolgate/code": text.code, "toolgate/decision_id": result.decision_id})

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)
