"""Authentication: API key in metadata → Identity. Tenant and agent come only from here.

Keys arrive as ``x-api-key: <key>`` or ``authorization: Bearer <key>`` and are looked up by
their sha256 (the config stores only hashes). Every toolgate.v1 service is added to the server
through ``AuthenticatedServer``, which wraps each method's handler once, at registration:
an unknown or missing key is audited and aborted with UNAUTHENTICATED when the call's headers
arrive, before its request message is read (``KeyedFirst``: a caller with no key holds nothing
open waiting for a message it never sends), and the handler checks again before it decodes the
message (a caller with no key gets no parser; bytes
that do not decode, from a caller with a key, are audited and refused INVALID_ARGUMENT);
health and reflection, added to the server directly, stay open for probes. A handler that
fails unexpectedly (a bug, a store that is gone) is audited too (``request``,
``internal_error``, the exception's type) and answered INTERNAL with that record's id, never
with the exception's text.

Not a ``grpc.aio.ServerInterceptor``: an interceptor runs a coroutine and builds a new
handler on every call (~18 µs per call measured); wrapping at registration does the same
check for the cost of one extra frame, and the header-time check is one generic handler
lookup (the services are added as generic handlers, not registered methods: within noise of
them through the bench's allow path). tests/e2e/test_auth_every_method.py calls every
method of every toolgate.v1 service in the proto without a key.

Refusals are audited without letting a caller with no key grow the log at will
(``RefusalAudit``): each is a record of its own up to a burst of ``REFUSALS_BURST`` and
``REFUSALS_PER_SECOND`` after that; past it they are counted, and a record of the count
(``suppressed``, no ``method``) is written a moment later, so every refusal is still accounted
for in the chain. The server's other refusals of keyless callers (public streams past their
limit, unknown methods) share the same allowance.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import time
from typing import Any, Callable, Iterable

import grpc
import structlog

from gateway.audit import AuditLog
from gateway.codes import Code
from gateway.config import IdentityConfig
from gateway.edge_limits import WrappedGeneric
from gateway.models import Identity, new_decision_id

REFUSALS_BURST, REFUSALS_PER_SECOND = 50, 10.0
log = structlog.get_logger("toolgate.auth")

current_identity: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("toolgate_identity", default=None)


class Authenticator:
    def __init__(self, identities: Iterable[IdentityConfig]) -> None:
        self._by_hash: dict[str, Identity] = {}
        for ident in identities:
            self._by_hash[ident.api_key_sha256] = Identity(
                tenant=ident.tenant,
                agent=ident.agent or ident.name,
                user=ident.user or (ident.approver if "approver" in ident.roles else ""),
                roles=frozenset(ident.roles),
            )

    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> Identity | None:
        key = _api_key(metadata or ())
        if not key:
            return None
        digest = hashlib.sha256(key.encode()).hexdigest()
        for known, identity in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return identity
        return None


def _api_key(metadata: Iterable[tuple[str, Any]]) -> str:
    """The call's one API key (``x-api-key``, or ``authorization: Bearer``); "" when there is
    none, or more than one: with two, which one counts would depend on their order (a proxy may
    add one), so neither does."""
    keys = []
    for name, value in metadata:
        if isinstance(value, bytes):
            continue
        if name == "x-api-key":
            keys.append(value.strip())
        elif name == "authorization" and value.lower().startswith("bearer "):
            keys.append(value[7:].strip())
    return keys[0] if len(keys) == 1 else ""


class RefusalAudit:
    """Audits refusals of callers who may hold no key, without letting them grow the log at
    will (see the module docstring). One per server, shared by every such refusal: a flood of
    any kind spends the same allowance. Counts are kept per ``(stage, code)``."""

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit
        self._allowance, self._at = float(REFUSALS_BURST), time.monotonic()
        self._suppressed: dict[tuple[str, str], int] = {}
        self._pending: asyncio.TimerHandle | None = None

    def refused(self, stage: str, code: str, peer: str, **fields: Any) -> None:
        """One record (``stage``, ``code``, ``peer``, ``fields``) if the allowance has room,
        else one more in the count. ``fields`` must already be safe to store (``caller_text``)."""
        now = time.monotonic()
        self._allowance = min(float(REFUSALS_BURST), self._allowance + (now - self._at) * REFUSALS_PER_SECOND)
        self._at = now
        if self._allowance < 1.0:
            if not self._suppressed:  # the counts are written once a record is allowed again
                self._pending = asyncio.get_running_loop().call_later(1.0 / REFUSALS_PER_SECOND, self._audit_suppressed)
            self._suppressed[(stage, code)] = self._suppressed.get((stage, code), 0) + 1
            return
        self._allowance -= 1.0
        self._write(stage, code, peer=peer, **fields)

    def close(self) -> None:
        """Write the counts not yet written (at shutdown, before the audit log closes)."""
        if self._pending is not None:
            self._pending.cancel()
        if self._suppressed:
            self._audit_suppressed()

    def _audit_suppressed(self) -> None:
        self._pending = None
        counts, self._suppressed = self._suppressed, {}
        for (stage, code), count in counts.items():
            self._write(stage, code, suppressed=count)

    def _write(self, stage: str, code: str, **fields: Any) -> None:
        """One record, flushed. A log that cannot be written (disk full, closed) is logged, never
        raised: the refusal still goes out, and its caller hears no exception text."""
        try:
            self._audit.record(stage, decision_id=new_decision_id(), code=code, **fields)
            self._audit.flush()
        except Exception as exc:  # noqa: BLE001 - any failure of the log itself
            log.error("refusal_not_audited", stage=stage, code=code, error=type(exc).__name__)


class AuthenticatedServer:
    """Stands in for the server while services are added: every method handler added through
    it is wrapped to authenticate the caller first (see the module docstring)."""

    def __init__(self, server: grpc.aio.Server, authenticator: Authenticator, audit: AuditLog,
                 refusals: RefusalAudit) -> None:
        self._server = server
        self._auth = authenticator
        self._audit = audit
        self._refusals = refusals

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(self._keyed(WrappedGeneric(h, self._wrap)) for h in handlers))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        """Added as a generic handler, not registered: gRPC looks a generic handler up when the
        call's headers arrive, before its message is read (``KeyedFirst``). (The generated
        ``add_*_to_server`` also passes the same handlers to ``add_generic_rpc_handlers``, which
        answers first; this route serves code generated without that.)"""
        wrapped = {name: self._wrap(h, f"/{service}/{name}") for name, h in handlers.items()}
        self._server.add_generic_rpc_handlers((self._keyed(grpc.method_handlers_generic_handler(service, wrapped)),))

    def _keyed(self, inner: grpc.GenericRpcHandler) -> KeyedFirst:
        return KeyedFirst(inner, self._auth, self._refusals)

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The wrapped handler takes the request undecoded (no ``request_deserializer``): the
        wrapper decodes it once the caller is known."""
        decode = handler.request_deserializer or (lambda raw: raw)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method, decode),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method, decode),
                response_serializer=handler.response_serializer,
            )
        raise ValueError(f"{method}: only unary and server-streaming methods can be authenticated")

    async def _identify(self, context: grpc.aio.ServicerContext, method: str) -> Identity:
        identity = self._auth.authenticate(context.invocation_metadata())
        if identity is None:
            self._refusals.refused("authenticate", str(Code.UNAUTHENTICATED), context.peer(), method=method)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        return identity  # type: ignore[return-value]

    async def _decode(self, context: grpc.aio.ServicerContext, method: str, identity: Identity,
                      decode: Callable[[bytes], Any], raw: bytes) -> Any:
        """The request message; bytes that do not decode are audited (``request``,
        ``invalid_arguments``, the caller) and refused with INVALID_ARGUMENT."""
        try:
            return decode(raw)
        except Exception as exc:  # whatever the decoder raises (a DecodeError): the bytes are the caller's
            audit_request(self._audit, context, method, identity, Code.INVALID_ARGUMENTS,
                          reason=f"undecodable request message ({type(exc).__name__})")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request message could not be decoded")

    async def _failed(self, context: grpc.aio.ServicerContext, method: str, identity: Identity | None,
                      exc: Exception) -> None:
        """A handler failed unexpectedly (a bug, the store gone): audit it (``request``,
        ``internal_error``, the exception's type) and answer INTERNAL with the record's id, never
        the exception's text (it can hold file paths and SQL)."""
        log.error("handler_failed", method=method, error=type(exc).__name__, exc_info=exc)
        message = "the gateway failed to process the request"
        try:
            decision_id = audit_request(self._audit, context, method, identity, Code.INTERNAL_ERROR,
                                        reason=message, error=type(exc).__name__)
        except Exception as audit_exc:  # the log itself failed: still no exception text for the caller
            log.error("handler_failure_not_audited", method=method, error=type(audit_exc).__name__)
            await context.abort(grpc.StatusCode.INTERNAL, message)
        await context.abort(grpc.StatusCode.INTERNAL, f"{message}; its audit log has it as {decision_id}")

    def _wrap_unary(self, behavior: Callable[..., Any], method: str, decode: Callable[[bytes], Any]) -> Callable[..., Any]:
        async def wrapper(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            identity, token = None, None
            try:  # authentication and decoding too: their audit writes can fail
                identity = await self._identify(context, method)
                token = current_identity.set(identity)
                return await behavior(await self._decode(context, method, identity, decode, raw), context)
            except grpc.aio.AbortError:  # the handler's own answer (audited where it was made)
                raise
            except Exception as exc:
                await self._failed(context, method, identity, exc)
            finally:
                if token is not None:
                    current_identity.reset(token)

        return wrapper

    def _wrap_stream(self, behavior: Callable[..., Any], method: str, decode: Callable[[bytes], Any]) -> Callable[..., Any]:
        async def wrapper(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            identity, token = None, None
            try:  # authentication and decoding too: their audit writes can fail
                identity = await self._identify(context, method)
                token = current_identity.set(identity)
                async for item in behavior(await self._decode(context, method, identity, decode, raw), context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._failed(context, method, identity, exc)
            finally:
                if token is not None:
                    current_identity.reset(token)

        return wrapper


class KeyedFirst(grpc.GenericRpcHandler):
    """``inner``'s methods, for a caller whose metadata holds a known key; for any other caller
    a handler that refuses at once (audited, UNAUTHENTICATED) and reads nothing.

    A unary method's handler runs once its request message has arrived: a caller with no key
    that never sends one held the call open for as long as it liked, unaudited, and thousands of
    such calls held the server's memory. The lookup runs when the call's headers arrive."""

    def __init__(self, inner: grpc.GenericRpcHandler, authenticator: Authenticator, refusals: RefusalAudit) -> None:
        self._inner = inner
        self._auth = authenticator
        self._refusals = refusals

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None or self._auth.authenticate(handler_call_details.invocation_metadata) is not None:
            return handler
        method = handler_call_details.method

        async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
            self._refusals.refused("authenticate", str(Code.UNAUTHENTICATED), context.peer(), method=method)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)

        return grpc.stream_stream_rpc_method_handler(refuse)


UNAUTHENTICATED_MESSAGE = "missing or unknown API key (send exactly one)"


def audit_request(audit: AuditLog, context: grpc.aio.ServicerContext, method: str, identity: Identity | None,
                  code: Code, *, stage: str = "request", **fields: Any) -> str:
    """Audit a request answered at the edge, outside the pipeline (``stage``: ``request``, or the
    service's own, as the Approvals service's ``approval``; its code, the method, the peer, the
    caller if known; ``fields`` already safe to store); returns its decision id."""
    decision_id = new_decision_id()
    caller = {} if identity is None else {"tenant": identity.tenant, "agent": identity.agent, "user": identity.user}
    audit.record(stage, decision_id=decision_id, code=str(code), method=method, peer=context.peer(),
                 **caller, **fields)
    audit.flush()
    return decision_id


def require_identity() -> Identity:
    identity = current_identity.get()
    if identity is None:  # AuthenticatedServer guarantees this never happens
        raise RuntimeError("handler ran without an authenticated identity")
    return identity
