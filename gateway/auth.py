"""Authentication: API key in metadata → Identity. Tenant and agent come only from here.

Keys arrive as ``x-api-key: <key>`` or ``authorization: Bearer <key>`` and are looked up by
their sha256 (the config stores only hashes). The interceptor wraps every toolgate.v1 method:
an unknown or missing key is audited and aborted with UNAUTHENTICATED before the handler
runs; health and reflection stay open for probes.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import uuid
from typing import Any, Callable, Iterable

import grpc

from gateway.audit import AuditLog
from gateway.config import IdentityConfig
from gateway.models import Identity

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
    for name, value in metadata:
        if isinstance(value, bytes):
            continue
        if name == "x-api-key":
            return value.strip()
        if name == "authorization" and value.lower().startswith("bearer "):
            return value[7:].strip()
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticate every toolgate.v1 call; audit and refuse the rest."""

    def __init__(self, authenticator: Authenticator, audit: AuditLog) -> None:
        self._auth = authenticator
        self._audit = audit

    async def intercept_service(
        self, continuation: Callable[..., Any], handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or not method.startswith("/toolgate.v1."):
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _identify(self, context: grpc.aio.ServicerContext, method: str) -> Identity:
        identity = self._auth.authenticate(context.invocation_metadata())
        if identity is None:
            self._audit.record(
                "authenticate", decision_id=str(uuid.uuid4()), code="unauthenticated", method=method, peer=context.peer()
            )
            self._audit.flush()
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown API key")
        return identity  # type: ignore[return-value]

    def _wrap_unary(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            identity = await self._identify(context, method)
            token = current_identity.set(identity)
            try:
                return await behavior(request, context)
            finally:
                current_identity.reset(token)

        return wrapper

    def _wrap_stream(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            identity = await self._identify(context, method)
            token = current_identity.set(identity)
            try:
                async for item in behavior(request, context):
                    yield item
            finally:
                current_identity.reset(token)

        return wrapper


def require_identity() -> Identity:
    identity = current_identity.get()
    if identity is None:  # the interceptor guarantees this never happens
        raise RuntimeError("handler ran without an authenticated identity")
    return identity
