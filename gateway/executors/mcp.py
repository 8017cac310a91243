"""Front an existing MCP server (stdio or streamable HTTP) as an executor.

An upstream's tools reach agents only through toolgate descriptors (``executor.kind: mcp``,
``server``, ``remote_tool``) that classify their risk; the executor calls exactly the
descriptor's ``remote_tool`` and nothing else, so an upstream tool without a descriptor is not
callable (``unknown_tool`` at the gateway).

Each call opens its own session — a fresh stdio process or HTTP session — so one tenant's
injected credentials never share a process or connection with another's: ``env`` credentials
go into the stdio server's environment (otherwise clean: the SDK's safe defaults, the
upstream's ``env``), ``header`` credentials into the HTTP requests.

A stdio server's HOME is the calling tenant's own folder of the tool's sandbox
(``ExecRequest.tenant_sandbox``, created if missing), as for a subprocess tool, so a token or
state it caches under HOME with one tenant's credentials no other tenant's call sees, and the
gateway user's own files are not its HOME. An upstream whose ``env`` sets ``HOME`` keeps that
(the operator's choice: one HOME shared by every tenant). Of the SDK's defaults, ``PATH``
stays (servers are commonly started with ``npx`` / ``uvx``), and ``USER``, ``LOGNAME``,
``SHELL`` and ``TERM`` stay: they name the account the process runs as anyway and its shell,
and locate no files of their own; the ``XDG_*`` folders are not passed on, so they fall under
HOME. A package runner's cache under HOME (npm's, uv's) is then per tenant as well; an
upstream's ``env`` may point it at a shared folder.

An HTTP upstream is dialled like an HTTP tool (``gateway.executors.egress_backend``): its host
name is resolved once and refused (``egress_denied``) if it resolves to a loopback, private,
link-local or other non-public address, unless the upstream sets ``allow_private_network``;
an IP literal in ``url`` is dialled as written. So a rebound name cannot carry the upstream's
header credentials to the metadata service or another host inside the network. A call narrowed
to hosts (``constraints.hosts``) goes to an HTTP upstream only if its own host is among them, and
never to a stdio upstream: a process cannot be held to hosts, so the call is refused
(``egress_denied``) before the server starts, rather than the narrowing ignored.

What one call receives from its upstream is bounded by the upstream's ``max_output_bytes``
(``DEFAULT_MAX_OUTPUT_BYTES``, 4 MiB): a stdio server's stdout and an HTTP server's response
bodies, counted over the call's whole session, the tool listing included. Past it the call is
a ``tool_error``, not retryable, naming the upstream, the limit and the option: a JSON-RPC
message cannot be cut meaningfully, so none of it is used. What the gateway holds meanwhile
stays near the limit (``gateway.executors.mcp_transport``): stdout is read in chunks and split
into lines as they come, a body is counted as it streams, a compressed body is refused (the
gateway asks for ``identity``), and a stdio server past the limit is killed at once. A stdio
server runs in its own process group; at the session's end its stdin is closed, it gets two
seconds to exit, then the group is killed with whatever the server left running in it. A
stdio server that cannot be started (``command`` missing or not executable, ``cwd`` missing)
is a ``tool_error`` that is not retryable, naming what is missing and the options to check; one
the gateway could not start for want of processes, open files or memory is a retryable one.

A stdio upstream's stderr never reaches the gateway's own stderr or logs: it goes to a pipe read
into a bounded buffer (``STDERR_CAP_BYTES``, cut so that no secret is split) and comes back as
the result's stderr, which normalization scrubs like any tool output (for a failure, its tail
is shown in the error message). An ``isError`` result's text is the error message whole:
normalization scrubs it before trimming it.

Every session lists the upstream's tools (``gateway.executors.mcp_pins``): a listing of more
than the upstream's ``max_tools`` tools is refused (``tool_error``, not retryable). Each
descriptor's remote tool's definition (description and schema) as this process first sees it
listed is its baseline, for a tool added after the first listing too; any difference between
two listings (tools added, removed, or changed) is logged as ``mcp_upstream_tools_changed``. A
remote tool whose definition changed since its baseline is refused (``tool_error``) unless the
upstream sets ``pin_tools: false`` — a changed tool has not been classified. Tools no
descriptor names are not pinned: what is remembered is bounded by the config.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping

import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.codes import Code
from gateway.executors.base import ExecRequest, ExecResult, exception_in, unconfined_egress
from gateway.executors.capture import CappedOutput, captured_pipe
from gateway.executors.egress_backend import CheckedBackend, Resolver, non_public_in, system_resolver
from gateway.executors.http import EgressDenied, check_egress, narrowed_hosts
from gateway.executors.mcp_pins import DEFAULT_MAX_TOOLS, ToolPins, classified_remote_tools
from gateway.executors.sdk_logs import withhold_sdk_details
from gateway.executors.subprocess import SHORT_OF_RESOURCES, SpawnFailed, sandbox_cwd

if TYPE_CHECKING:  # the transports import the SDK, which is loaded for the first call only
    from gateway.executors.mcp_transport import OutputBudget

log = structlog.get_logger("toolgate.mcp")
withhold_sdk_details()  # the SDK logs upstream output unscrubbed (gateway.executors.sdk_logs)

STDERR_CAP_BYTES = 64 * 1024
"""What a stdio upstream writes to stderr during one call is kept up to this size."""
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
"""What one call may receive from its upstream by default: four times the other executors' 1 MiB
output cap, since the call's tool listing counts too (a server with many tools lists tens or
hundreds of KiB of schemas), a result may carry its data twice (text and structured content),
and JSON escaping grows text."""


class UpstreamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    transport: Literal["stdio", "http"]
    """stdio: launch ``command``; http: streamable HTTP at ``url``."""
    command: str = ""
    """stdio: the executable."""
    args: list[str] = Field(default_factory=list)
    """stdio: its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: fixed environment entries (besides the SDK's safe defaults and env credentials); a
    ``HOME`` here replaces the calling tenant's sandbox folder."""
    cwd: str = ""
    """stdio: working folder (relative to the config file)."""
    url: str = ""
    """http: the MCP endpoint."""
    headers: dict[str, str] = Field(default_factory=dict)
    """http: fixed request headers."""
    allow_private_network: bool = False
    """http: let ``url``'s host name resolve to a loopback or private address (an upstream inside
    the network); otherwise such a name is ``egress_denied``. An IP literal is always dialled."""
    pin_tools: bool = True
    """Refuse a remote tool whose definition changed since this process first listed it."""
    max_output_bytes: int = Field(default=DEFAULT_MAX_OUTPUT_BYTES, gt=0)
    """What one call may receive from the upstream, in bytes (a stdio server's stdout, an HTTP
    server's response bodies), its tool listing included; more is a ``tool_error``."""
    max_tools: int = Field(default=DEFAULT_MAX_TOOLS, gt=0)
    """How many tools one listing of the upstream may hold; a listing of more fails the call
    (``tool_error``), whatever tool it is for."""


class McpConfigError(ValueError):
    """``mcp_upstreams`` does not validate, or a descriptor names an unknown upstream."""


def parse_upstreams(raw: Mapping[str, Any]) -> dict[str, UpstreamConfig]:
    try:
        upstreams = {name: UpstreamConfig.model_validate(spec) for name, spec in raw.items()}
    except ValidationError as exc:
        raise McpConfigError(f"mcp_upstreams: {exc}") from exc
    for name, up in upstreams.items():
        if (up.transport == "stdio") != bool(up.command) or (up.transport == "http") != bool(up.url):
            raise McpConfigError(f"mcp_upstreams.{name}: stdio needs command, http needs url")
        if up.transport == "http" and (problem := _url_problem(up.url)):
            raise McpConfigError(f"mcp_upstreams.{name}.url: {problem}")
    return upstreams


def _url_problem(url: str) -> str:
    """Why ``url`` cannot be an HTTP upstream's address, or "": checked at load, not at each call."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"not a URL ({exc})"
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return "must be an http:// or https:// URL with a host"
    return ""


class McpExecutor:
    def __init__(self, upstreams: Mapping[str, UpstreamConfig], base_dir: str = ".", *,
                 resolver: Resolver = system_resolver, classified: Mapping[str, Iterable[str]] | None = None) -> None:
        """``classified``: upstream name → the remote tools descriptors name on it, pinned from the
        first listing on (``gateway.executors.mcp_pins``); others are pinned from their first call."""
        self._upstreams = dict(upstreams)
        self._base_dir = base_dir
        self._resolver = resolver
        self.pins = ToolPins(classified)
        """What is kept of the upstreams' tool listings (``gateway.executors.mcp_pins``)."""

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], config: Any = None) -> "McpExecutor":
        return cls(parse_upstreams(raw), getattr(config, "base_dir", "."),
                   classified=classified_remote_tools(getattr(config, "tools", ())))

    def confines_hosts(self, tool: Any) -> bool:
        """An HTTP upstream's host is checked against the call's hosts; a stdio upstream is a process,
        which can reach any host; an upstream it does not know confines nothing."""
        upstream = self._upstreams.get(tool.executor.server)
        return upstream is not None and upstream.transport != "stdio"

    async def execute(self, request: ExecRequest) -> ExecResult:
        ex = request.tool.executor
        upstream = self._upstreams.get(ex.server)
        if upstream is None:
            return ExecResult.failure(Code.TOOL_ERROR.value, f"no MCP upstream named {ex.server!r}")
        remote = ex.remote_tool or request.tool.name
        if upstream.transport == "stdio" and (refused := unconfined_egress(request)) is not None:
            return refused
        if (denied := _outside_narrowed_hosts(upstream, request)) is not None:
            return ExecResult.failure(Code.EGRESS_DENIED.value, f"MCP upstream {ex.server}: {denied}")
        try:
            return await self._call(ex.server, upstream, remote, request)
        except Exception as exc:  # transport and protocol failures of the upstream, reported as data
            return _upstream_failure(ex.server, upstream, exc)

    async def _call(self, name: str, upstream: UpstreamConfig, remote: str, request: ExecRequest) -> ExecResult:
        from gateway.executors.mcp_transport import OutputBudget

        creds = request.credentials
        stderr = CappedOutput(STDERR_CAP_BYTES, creds.secret_values if creds is not None else ())
        budget = OutputBudget(name, upstream.max_output_bytes)
        try:
            outcome = await self._session(name, upstream, remote, request, stderr, budget)
        except Exception:
            if budget.refusal is None:
                raise
        # the session is over: the upstream has exited and its stderr has been read
        if budget.refusal is not None:  # however the SDK passed the refusal on: raised, wrapped or swallowed
            log.warning("mcp_upstream_output_refused", upstream=name, max_output_bytes=budget.cap)
            outcome = ExecResult.failure(Code.TOOL_ERROR.value, budget.refusal)
        return dataclasses.replace(outcome, stderr=stderr.text())

    async def _session(self, name: str, upstream: UpstreamConfig, remote: str, request: ExecRequest,
                       stderr: CappedOutput, budget: OutputBudget) -> ExecResult:
        from mcp import Client

        async with AsyncExitStack() as stack:
            target = await self._target(stack, upstream, request, stderr, budget)
            client = await stack.enter_async_context(
                Client(target, mode="legacy", cache=None, read_timeout_seconds=request.timeout))
            listing = await client.list_tools()
            secrets = request.credentials.secret_values if request.credentials is not None else ()
            refused = self.pins.check(name, remote, listing.tools, pin=upstream.pin_tools,
                                      max_tools=upstream.max_tools, secrets=secrets)
            if refused is not None:
                return ExecResult.failure(Code.TOOL_ERROR.value, refused)
            return _to_result(await client.call_tool(remote, dict(request.args)))

    async def _target(self, stack: AsyncExitStack, upstream: UpstreamConfig, request: ExecRequest,
                      stderr: CappedOutput, budget: OutputBudget) -> Any:
        creds = request.credentials
        if upstream.transport == "stdio":
            from mcp.client.stdio import get_default_environment

            from gateway.executors.mcp_transport import stdio_transport

            cwd = str((Path(self._base_dir) / upstream.cwd).resolve()) if upstream.cwd else None
            env = get_default_environment() | _stdio_env(upstream, request)
            # not the gateway's own stderr (the SDK's default): unscrubbed, into its logs
            errlog = await stack.enter_async_context(captured_pipe(stderr))
            return stdio_transport(upstream.command, upstream.args, env=env, cwd=cwd, stderr=errlog, budget=budget)
        from mcp.client.streamable_http import streamable_http_client

        headers = {**upstream.headers, **(dict(creds.headers) if creds is not None else {})}
        http = await stack.enter_async_context(self._http_client(upstream, headers, request.timeout, budget))
        return streamable_http_client(upstream.url, http_client=http)

    def _http_client(self, upstream: UpstreamConfig, headers: dict[str, str], timeout: float,
                     budget: OutputBudget) -> Any:
        import httpcore2
        import httpx2

        from gateway.executors.mcp_transport import CappedHTTPTransport

        transport = CappedHTTPTransport(budget, trust_env=False)
        # as in gateway.executors.http: the pool takes no backend argument through httpx2, so its
        # attribute is set; tests/executors/test_mcp.py fails if a rebound name gets through
        transport._pool._network_backend = CheckedBackend(  # type: ignore[attr-defined]
            allow_private=upstream.allow_private_network, resolver=self._resolver, core=httpcore2)
        fixed = httpx2.Headers(headers)
        fixed["accept-encoding"] = "identity"  # a compressed body is refused (gateway.executors.mcp_transport)
        return httpx2.AsyncClient(headers=fixed, timeout=timeout, trust_env=False, transport=transport)


def _upstream_failure(name: str, upstream: UpstreamConfig, exc: Exception) -> ExecResult:
    """The result of a call the upstream's transport or protocol failed: egress refused, the
    server not started (neither retryable), or a failure a retry may get past."""
    refused = non_public_in(exc)
    if refused is not None:
        log.warning("mcp_upstream_egress_denied", upstream=name, error=str(refused))
        return ExecResult.failure(Code.EGRESS_DENIED.value, f"MCP upstream {name}: {refused}")
    spawn = exception_in(exc, SpawnFailed)
    short = exception_in(exc, OSError)
    if spawn is None and short is not None and short.errno in SHORT_OF_RESOURCES:  # a pipe for it, say
        spawn = SpawnFailed(upstream.command or upstream.url, short)
    if spawn is not None:
        return _not_started(name, upstream, spawn)
    log.warning("mcp_upstream_failed", upstream=name, error_type=type(exc).__name__)
    return ExecResult.failure(Code.TOOL_ERROR.value, f"MCP upstream {name} failed: {type(exc).__name__}",
                              retryable=True)


def _not_started(name: str, upstream: UpstreamConfig, spawn: SpawnFailed) -> ExecResult:
    """A stdio server that could not be started: the operator's to fix, so not retryable; unless
    the gateway was short of processes, open files or memory (``SpawnFailed.transient``)."""
    log.warning("mcp_upstream_not_started", upstream=name, path=spawn.path, error=spawn.why, transient=spawn.transient)
    if spawn.transient:
        return ExecResult.failure(Code.TOOL_ERROR.value, f"MCP upstream {name} could not be started now: {spawn.why} "
                                  "(the gateway is short of processes, open files or memory)", retryable=True)
    if spawn.too_long:
        return ExecResult.failure(Code.TOOL_ERROR.value, f"MCP upstream {name} could not be started: {spawn.why}: "
                                  f"mcp_upstreams.{name}.args and its environment (.env, credentials) are longer "
                                  "than the system takes")
    where = f"mcp_upstreams.{name}.command" + (f" and .cwd ({upstream.cwd!r})" if upstream.cwd else "")
    return ExecResult.failure(
        Code.TOOL_ERROR.value, f"MCP upstream {name} could not be started: {spawn.path!r}: {spawn.why}. Check "
        f"{where}: the command must exist and be an executable program (a bare name is looked up on the "
        "server's PATH)")


def _outside_narrowed_hosts(upstream: UpstreamConfig, request: ExecRequest) -> str | None:
    """Why an HTTP upstream may not be dialled for this call, or None: as for the HTTP executor,
    the policy's ``hosts`` constraint and the credential's hosts narrow where the call (and its
    header credentials) may go, here to the upstream's own host or nowhere."""
    if upstream.transport != "http":
        return None
    url = httpx.URL(upstream.url)
    host, port = url.host.lower().rstrip("."), url.port or (443 if url.scheme == "https" else 80)
    hosts = narrowed_hosts([f"{host}:{port}"], request)  # with its port: an IPv6 host's last group is no port
    try:  # the host only: the scheme and the rest of the URL are the operator's
        check_egress(httpx.URL(scheme=url.scheme, host=url.host, port=url.port), hosts, allow_http=True)
    except EgressDenied as exc:
        return f"{exc} for this call"
    return None


def _stdio_env(upstream: UpstreamConfig, request: ExecRequest) -> dict[str, str]:
    """What is merged over the SDK's default environment: HOME (the tenant's sandbox folder, unless the
    upstream's ``env`` sets one), the upstream's ``env``, the env credentials."""
    creds = request.credentials
    home = {} if "HOME" in upstream.env else {"HOME": str(sandbox_cwd(request.tenant_sandbox, ""))}
    return {**home, **upstream.env, **(dict(creds.env) if creds is not None else {})}


def _to_result(result: Any) -> ExecResult:
    blocks = [_block(b) for b in result.content]
    data: Any = result.structured_content if result.structured_content is not None else _unwrap(blocks)
    if result.is_error:  # the text whole: normalization scrubs it, then trims it
        text = " ".join(b.get("text", "") for b in blocks if isinstance(b, dict))
        return ExecResult.failure(Code.TOOL_ERROR.value, text or "the upstream tool reported an error", data=data)
    return ExecResult(ok=True, data=data)


def _unwrap(blocks: list[Any]) -> Any:
    """One text block: its JSON value if it is JSON, else the text; otherwise the blocks."""
    if len(blocks) == 1 and isinstance(blocks[0], dict) and blocks[0].get("type") == "text":
        try:
            return json.loads(blocks[0]["text"])
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse: the text
            return blocks[0]["text"]
    return {"content": blocks}


def _block(block: Any) -> Any:
    if getattr(block, "type", "") == "text":
        return {"type": "text", "text": block.text}
    return block.model_dump(mode="json", exclude_none=True) if hasattr(block, "model_dump") else str(block)
