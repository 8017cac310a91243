"""GatewayClient (sync) and AsyncGatewayClient: the agent's side of the wire contract.

Policy outcomes come back as values (``ToolResult.outcome`` is an ``Observation``,
``Refused``, ``ApprovalRequired`` or ``EvidenceRequired``); only transport failures raise.

``list_tools`` answers from a cache kept for ``tools_ttl`` seconds (60 by default); a refusal
that says the cached view is out of date (``STALE_VIEW_CODES``) drops it at once, and
``list_tools(refresh=True)`` asks the gateway now.

After ``close()`` (or leaving the client's ``with`` / ``async with`` block) every call raises
``ClientClosedError`` (code ``client_closed``), whatever the transport, cached answers included;
``close()`` itself may be called again.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.channel_checks import api_key_problem, client_pair_problem, on_this_machine
from gateway.key_files import KeyFileExposed, read_key_file
from runtime_client._errors import (
    ApprovalTimeoutError,
    ClientClosedError,
    GatewayTimeoutError,
    GrantUnavailableError,
)
from runtime_client._transport import AsyncTransport, Transport
from runtime_client._types import Approval, ExecuteRequest, Refused, ToolResult, ToolSpec

DEFAULT_TIMEOUT = 30.0
DEFAULT_APPROVAL_TIMEOUT = 900.0
DEFAULT_TOOLS_TTL = 60.0
"""Seconds a ``list_tools`` answer is reused: how long a tool the gateway added, or a changed
risk or description, can go unseen. A removed tool or changed schema shows sooner: see below."""
STALE_VIEW_CODES = frozenset({"unknown_tool", "invalid_arguments"})
"""Refusals that may mean the cached tool list is out of date: the next ``list_tools`` asks."""
GRANTED_STATUSES = frozenset({"approved", "executed"})


def _client_key(path: str) -> bytes:
    """``TOOLGATE_CLIENT_KEY``'s bytes (``read_key_file``): refused when others may read it, its group
    or others write it, or another user (not root) owns it; whoever can read it can connect as this agent."""
    try:
        return read_key_file(path, group_may_read=True)  # a root-owned Secret mounted 0440 for the agent's group
    except KeyFileExposed as exc:
        raise ValueError(f"TOOLGATE_CLIENT_KEY {exc}, and whoever can read it can connect as this agent; "
                         f"{exc.remedy}") from None


def _credentials(target: str, credentials: Any, insecure: bool) -> Any:
    """``credentials``, else TLS from ``TOOLGATE_CA_FILE`` (and ``TOOLGATE_CLIENT_CERT`` /
    ``TOOLGATE_CLIENT_KEY`` for mTLS), else None (plaintext): only to a gateway on this machine
    unless ``insecure``, since every call carries the API key."""
    if credentials is None:
        files = [os.environ.get(f"TOOLGATE_{name}", "") for name in ("CA_FILE", "CLIENT_KEY", "CLIENT_CERT")]
        if any(files):
            import grpc

            if problem := client_pair_problem(files[1], files[2]):
                raise ValueError(f"TOOLGATE_CLIENT_KEY / TOOLGATE_CLIENT_CERT: {problem}")

            root, cert = (Path(f).read_bytes() if f else None for f in (files[0], files[2]))
            key = _client_key(files[1]) if files[1] else None
            credentials = grpc.ssl_channel_credentials(root, key, cert)
    if credentials is None and not insecure and not on_this_machine(target):
        raise ValueError(f"{target} is not on this machine and no TLS credentials were given, so the API key would "
                         "travel unencrypted: pass credentials=grpc.ssl_channel_credentials(...), set "
                         "TOOLGATE_CA_FILE, or pass insecure=True")
    return credentials


def _target_and_key(target: str | None, api_key: str | None) -> tuple[str, str]:
    target = target or os.environ.get("TOOLGATE_TARGET", "")
    api_key = api_key or os.environ.get("TOOLGATE_API_KEY", "")
    if not target:
        raise ValueError("no gateway target: pass target= or set TOOLGATE_TARGET")
    if not api_key:
        raise ValueError("no API key: pass api_key= or set TOOLGATE_API_KEY")
    if problem := api_key_problem(api_key):
        raise ValueError(problem)
    return target, api_key


def _request(tool: str, args: dict[str, Any] | None, **fields: Any) -> ExecuteRequest:
    if not isinstance(tool, str) or not tool:
        raise ValueError("tool must be a non-empty string")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise TypeError(f"args must be a dict (a JSON object), not {type(args).__name__}")
    return ExecuteRequest(tool=tool, args=args, **fields)


def _grant_of(approval: Approval) -> str:
    if approval.status not in GRANTED_STATUSES or not approval.grant:
        raise GrantUnavailableError(
            f"approval {approval.approval_id} has no grant (status {approval.status})",
            approval_id=approval.approval_id, status=approval.status)
    return approval.grant


class _Closable:
    """The closed flag both clients share: ``_check_open`` before every call."""

    _closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError()


class _ToolCache:
    """``list_tools`` answers for ``ttl`` seconds (``None``: until refreshed; ``0``: not kept).

    Each fetch takes a ticket; only the newest ticket's answer is kept, so a list fetched
    before an invalidation (or before a newer fetch) is returned to its caller but not reused.
    """

    def __init__(self, ttl: float | None, clock: Callable[[], float]) -> None:
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))):
            raise TypeError(f"tools_ttl must be seconds or None, not {type(ttl).__name__}")
        if ttl is not None and not ttl >= 0:
            raise ValueError("tools_ttl must be >= 0 seconds (or None: keep until refreshed)")
        self._ttl, self._clock = ttl, clock
        self._tools: tuple[ToolSpec, ...] = ()
        self._expires = -math.inf
        self._generation = 0

    def get(self) -> list[ToolSpec] | None:
        return list(self._tools) if self._clock() < self._expires else None

    def ticket(self) -> tuple[int, float]:
        self._generation += 1
        return self._generation, self._clock()

    def put(self, ticket: tuple[int, float], tools: list[ToolSpec]) -> list[ToolSpec]:
        generation, asked_at = ticket
        if generation == self._generation:
            self._tools = tuple(tools)
            self._expires = math.inf if self._ttl is None else asked_at + self._ttl
        return list(tools)

    def invalidate(self) -> None:
        self._expires = -math.inf
        self._generation += 1

    def seen(self, result: ToolResult) -> ToolResult:
        """Drop the list when the gateway's answer says it may be out of date."""
        if isinstance(result.outcome, Refused) and result.outcome.code in STALE_VIEW_CODES:
            self.invalidate()
        return result


class AsyncGatewayClient(_Closable):
    """Asyncio client. ``transport`` defaults to gRPC at ``target`` (or ``TOOLGATE_TARGET``):
    TLS with ``credentials`` (``grpc.ssl_channel_credentials``) or the ``TOOLGATE_CA_FILE``,
    ``TOOLGATE_CLIENT_CERT`` and ``TOOLGATE_CLIENT_KEY`` files; plaintext only to a gateway on
    this machine unless ``insecure=True`` (every call carries the API key).

    ``tools_ttl``: seconds a ``list_tools`` answer is reused (``None``: until refreshed).
    ``clock``: monotonic seconds, for the TTL (a parameter so tests need not sleep)."""

    def __init__(self, target: str | None = None, *, api_key: str | None = None,
                 transport: AsyncTransport | None = None, timeout: float = DEFAULT_TIMEOUT,
                 tools_ttl: float | None = DEFAULT_TOOLS_TTL,
                 clock: Callable[[], float] = time.monotonic, credentials: Any = None,
                 insecure: bool = False) -> None:
        tools = _ToolCache(tools_ttl, clock)
        if transport is None:
            from runtime_client._grpc import AsyncGrpcTransport

            target, api_key = _target_and_key(target, api_key)
            transport = AsyncGrpcTransport(target, api_key, timeout=timeout,
                                           credentials=_credentials(target, credentials, insecure))
        self._transport = transport
        self._tools = tools

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the transport; every later call raises ``ClientClosedError``."""
        self._closed = True
        await self._transport.close()

    async def list_tools(self, *, refresh: bool = False) -> list[ToolSpec]:
        """The tools this caller may see, cached for ``tools_ttl``; ``refresh=True`` asks now."""
        self._check_open()
        cached = None if refresh else self._tools.get()
        if cached is not None:
            return cached
        ticket = self._tools.ticket()
        return self._tools.put(ticket, await self._transport.list_tools())

    async def execute(self, tool: str, args: dict[str, Any] | None = None, **fields: Any) -> ToolResult:
        """One ExecuteTool call. ``fields``: run_id, step, idempotency_key, evidence,
        approval_grant, approval_id."""
        self._check_open()
        return self._tools.seen(await self._transport.execute(_request(tool, args, **fields)))

    async def get_approval(self, approval_id: str) -> Approval:
        self._check_open()
        return await self._transport.get_approval(approval_id)

    async def wait_for_approval(self, approval_id: str, *,
                                timeout: float = DEFAULT_APPROVAL_TIMEOUT) -> Approval:
        """Watch one approval until it is final (approved, rejected, expired, executed)."""
        self._check_open()
        try:
            async with asyncio.timeout(timeout):
                async for event in self._transport.watch_approval(approval_id, timeout=timeout):
                    if event.approval.final:
                        return event.approval
        except (TimeoutError, GatewayTimeoutError) as exc:
            raise ApprovalTimeoutError(
                f"approval {approval_id} not final after {timeout}s", approval_id=approval_id) from exc
        raise ApprovalTimeoutError(f"watch of {approval_id} ended before a final event",
                                   approval_id=approval_id)

    async def fetch_grant(self, approval_id: str) -> str:
        """The gateway-signed grant for an approved request (shown only to the requester)."""
        return _grant_of(await self.get_approval(approval_id))

    async def execute_approved(self, approval_id: str, tool: str, args: dict[str, Any] | None = None,
                               **fields: Any) -> ToolResult:
        """Retry an approved call with its grant; the gateway verifies it is bound to ``args``."""
        grant = await self.fetch_grant(approval_id)
        return await self.execute(tool, args, approval_grant=grant, **fields)


class GatewayClient(_Closable):
    """Blocking client with the same methods (and tool cache) as ``AsyncGatewayClient``."""

    def __init__(self, target: str | None = None, *, api_key: str | None = None,
                 transport: Transport | None = None, timeout: float = DEFAULT_TIMEOUT,
                 tools_ttl: float | None = DEFAULT_TOOLS_TTL,
                 clock: Callable[[], float] = time.monotonic, credentials: Any = None,
                 insecure: bool = False) -> None:
        tools = _ToolCache(tools_ttl, clock)
        if transport is None:
            from runtime_client._grpc import GrpcTransport

            target, api_key = _target_and_key(target, api_key)
            transport = GrpcTransport(target, api_key, timeout=timeout,
                                      credentials=_credentials(target, credentials, insecure))
        self._transport = transport
        self._tools = tools

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the transport; every later call raises ``ClientClosedError``."""
        self._closed = True
        self._transport.close()

    def list_tools(self, *, refresh: bool = False) -> list[ToolSpec]:
        self._check_open()
        cached = None if refresh else self._tools.get()
        if cached is not None:
            return cached
        ticket = self._tools.ticket()
        return self._tools.put(ticket, self._transport.list_tools())

    def execute(self, tool: str, args: dict[str, Any] | None = None, **fields: Any) -> ToolResult:
        self._check_open()
        return self._tools.seen(self._transport.execute(_request(tool, args, **fields)))

    def get_approval(self, approval_id: str) -> Approval:
        self._check_open()
        return self._transport.get_approval(approval_id)

    def wait_for_approval(self, approval_id: str, *,
                          timeout: float = DEFAULT_APPROVAL_TIMEOUT) -> Approval:
        self._check_open()
        try:
            for event in self._transport.watch_approval(approval_id, timeout=timeout):
                if event.approval.final:
                    return event.approval
        except GatewayTimeoutError as exc:
            raise ApprovalTimeoutError(
                f"approval {approval_id} not final after {timeout}s", approval_id=approval_id) from exc
        raise ApprovalTimeoutError(f"approval {approval_id} not final after {timeout}s",
                                   approval_id=approval_id)

    def fetch_grant(self, approval_id: str) -> str:
        return _grant_of(self.get_approval(approval_id))

    def execute_approved(self, approval_id: str, tool: str, args: dict[str, Any] | None = None,
                         **fields: Any) -> ToolResult:
        grant = self.fetch_grant(approval_id)
        return self.execute(tool, args, approval_grant=grant, **fields)
