"""MCP front door: an MCP server whose tools are the gateway's (``toolgate[mcp]``).

Any MCP client can list and call gateway tools through it; each call goes through the
gateway. Approval-required, refusals and evidence requests come back as MCP tool errors
(``isError=True``) with text the client can show, and the outcome code in ``_meta``; so does a
call the gateway could not answer (down, API key rejected), with the client error's code
(``toolgate/code``: ``unavailable``, ``unauthenticated``, ...). A tool listing the gateway could
not answer is an MCP error (``INTERNAL_ERROR``) whose message names the cause and whose data
carries ``toolgate/code``.

Each MCP session gets its own run id and its own ``ApprovalMemory``: the same call with the
same arguments, made again in that session once approved, presents its approval and runs; an
identical call from another session asks for its own approval, and idempotency keys never
cross sessions. A session is a handshake-era connection (stdio, stateful streamable HTTP,
``mcp.Client(..., mode="legacy")``); its state is dropped with the connection. The
2026-07-28 protocol and stateless HTTP carry no session: every request comes alone, so
nothing tells two clients apart, and such requests share one server-wide run id and memory
(else an approved call could never be retried, nor a lost answer heard). Passing ``run_id``
shares that run id and one memory across every session and request: the caller chose to.

``evidence``: a provider, as ``run_agent`` takes one (``EvidenceRequest`` in, a dict or None
out), asked when the policy wants more evidence for a call; the call is sent once more with
what it gives. Without one, when it gives None, or when the policy still wants more, the tool
error names what is missing (``toolgate/code`` ``evidence_required``); a provider that raises
is a tool error too (``evidence_provider_failed``). A call that then awaits approval is handled
as any other, and its approved call is sent with that evidence (kept in the session's memory).
"""

from __future__ import annotations

import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

try:
    from mcp import types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover
    raise ImportError("runtime_client.adapters.mcp needs mcp: pip install 'toolgate[mcp]'") from exc

from runtime_client._client import AsyncGatewayClient
from runtime_client._errors import ToolgateClientError
from runtime_client._evidence import EvidenceProvider
from runtime_client._types import ToolSpec
from runtime_client.adapters._common import ApprovalMemory, error_text
from runtime_client.adapters._common import call as call_gateway


@dataclass(slots=True)
class _Scope:
    """What the calls of one session share: the run id they carry and their approvals."""

    run_id: str = field(default_factory=lambda: f"mcp-{uuid.uuid4().hex}")
    memory: ApprovalMemory = field(default_factory=ApprovalMemory)


def _session_of(ctx: Any) -> Any:
    """The request's connection if it is a session (lives across requests), else None.

    mcp 2.3.0 hands lowlevel handlers a ``ServerRequestContext`` whose ``session`` is built
    anew for each request; the connection it wraps is the per-client object, and has no
    public accessor there yet (the SDK's newer ``Context.connection`` is not wired in)."""
    connection = getattr(ctx, "connection", None) or ctx.session._connection
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not connection.has_standalone_channel:
        return None  # built for this one request
    return connection


def _mcp_tool(spec: ToolSpec) -> types.Tool:
    annotations = types.ToolAnnotations(
        readOnlyHint=spec.read_only, destructiveHint=spec.risk.side_effect == "destructive")
    return types.Tool(name=spec.name, description=spec.description, inputSchema=spec.input_schema,
                      annotations=annotations)


def mcp_server(client: AsyncGatewayClient, *, name: str = "toolgate", run_id: str | None = None,
               evidence: EvidenceProvider | None = None) -> Server[Any]:
    """An MCP ``Server``; run it over stdio/HTTP, or pass it to ``mcp.Client`` in-process.

    ``run_id``: None (the default) gives each session a fresh run id and approval memory;
    a string is used by every session, sharing one memory. ``evidence``: asked when the policy
    wants more evidence for a call (see the module docstring)."""
    shared = _Scope(run_id) if run_id is not None else _Scope()
    sessions: weakref.WeakKeyDictionary[Any, _Scope] = weakref.WeakKeyDictionary()

    def scope(ctx: Any) -> _Scope:
        session = None if run_id is not None else _session_of(ctx)
        if session is None:
            return shared
        own = sessions.get(session)
        if own is None:
            own = sessions[session] = _Scope()
        return own

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        try:
            tools = await client.list_tools()
        except ToolgateClientError as exc:
            # else the SDK logs the traceback and sends "Internal server error", the cause lost
            text = error_text(exc)
            raise MCPError(INTERNAL_ERROR, f"cannot list the gateway's tools: {text.text}",
                           data={"toolgate/code": text.code}) from exc
        return types.ListToolsResult(tools=[_mcp_tool(t) for t in tools])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        own = scope(ctx)
        text, result = await call_gateway(client, own.memory, params.name, args, run_id=own.run_id,
                                          evidence=evidence)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text.text)], isError=text.is_error,
            _meta={"toolgate/code": text.code,
                   "toolgate/decision_id": result.decision_id if result is not None else ""})

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)
