"""How much one process takes on at once at the gRPC edge: calls in flight and open streams.

grpc's own ``maximum_concurrent_rpcs`` counts every RPC on the server, the health and
reflection streams too, which anyone may open without a key and hold open for as long as
they like: 4,096 idle ``Health.Watch`` streams used to make every ``ExecuteTool`` fail. So
the server sets no such limit; instead each kind of work has a gauge of its own:

- ``ExecuteTool`` calls in flight: ``limits.max_concurrent_calls``, counted in the pipeline
  after the key is checked, so only callers with a key count (``concurrency_limited``);
- ``Approvals.Watch`` streams: ``limits.max_watch_streams``, of which one tenant's approvers
  may hold ``limits.max_watch_streams_per_tenant``, and its other callers as many;
- streams anyone may open (health ``Watch``, reflection): ``limits.max_public_streams`` for
  each of those services, so neither can crowd out the other, nor the calls.

Past a limit a stream is refused at once with ``RESOURCE_EXHAUSTED``. A public stream refused
so is audited (``admit``, ``concurrency_limited``, the method and the peer) through the
server's ``gateway.auth.RefusalAudit``: its callers hold no key, so a flood of them is counted
rather than written line by line.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

import grpc

from gateway.codes import Code

if TYPE_CHECKING:  # gateway.auth imports this module
    from gateway.auth import RefusalAudit


class Gauge:
    """A count of open things with a limit (one event loop: no lock needed)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def enter(self) -> bool:
        """Count one more, if under the limit; ``leave`` once for each True."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        self.open -= 1


class TenantGauge(Gauge):
    """A ``Gauge`` that also holds each share (a tenant's approvers, say) to ``per_tenant`` of it:
    one tenant that opened every stream the process allows left every other tenant's approvers
    and agents none."""

    def __init__(self, limit: int, per_tenant: int) -> None:
        super().__init__(limit)
        self.per_tenant = min(per_tenant, limit)
        self._shares: dict[Hashable, int] = {}

    def enter_for(self, share: Hashable) -> str:
        """"" when counted (``leave_for`` once then); else what is full: "process" or "tenant"."""
        if self._shares.get(share, 0) >= self.per_tenant:
            return "tenant"
        if not self.enter():
            return "process"
        self._shares[share] = self._shares.get(share, 0) + 1
        return ""

    def leave_for(self, share: Hashable) -> None:
        self.leave()
        left = self._shares[share] - 1
        if left:
            self._shares[share] = left
        else:
            del self._shares[share]


def refuse_stream_message(what: str, limit: int) -> str:
    return f"{limit} {what} are open on this gateway process, its limit: close one or retry later"


class CappedStreams:
    """Stands in for the server while a service anyone may call is added: its streaming
    methods are counted against one gauge per service (refusals audited through ``refusals``);
    unary methods pass through."""

    def __init__(self, server: grpc.aio.Server, limit: int, refusals: RefusalAudit) -> None:
        self._server = server
        self._limit = limit
        self._refusals = refusals

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        for h in handlers:
            gauge = Gauge(self._limit)
            self._server.add_generic_rpc_handlers(
                (WrappedGeneric(h, lambda handler, method, g=gauge: capped(handler, g, method, self._refusals)),))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        gauge = Gauge(self._limit)
        self._server.add_registered_method_handlers(
            service, {n: capped(h, gauge, f"/{service}/{n}", self._refusals) for n, h in handlers.items()})


class WrappedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose method handlers come out as ``wrap(handler, method)`` (each
    wrapped once, then kept): how ``AuthenticatedServer`` and ``CappedStreams`` reach the
    methods of services that add themselves as generic handlers."""

    def __init__(self, inner: grpc.GenericRpcHandler, wrap: Callable[[grpc.RpcMethodHandler, str], Any]) -> None:
        self._inner = inner
        self._wrap = wrap
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is None or known[0] is not handler:
            known = self._wrapped[method] = (handler, self._wrap(handler, method))
        return known[1]


def capped(handler: grpc.RpcMethodHandler, gauge: Gauge, method: str, refusals: RefusalAudit) -> grpc.RpcMethodHandler:
    """``handler`` (of ``method``) with its stream counted against ``gauge``, a refusal audited
    through ``refusals`` (unary handlers unchanged)."""
    for kind, make in (("unary_stream", grpc.unary_stream_rpc_method_handler),
                       ("stream_stream", grpc.stream_stream_rpc_method_handler)):
        behavior = getattr(handler, kind)
        if behavior is not None:
            return make(_counted(behavior, gauge, method, refusals), request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
    return handler


def _counted(behavior: Callable[..., Any], gauge: Gauge, method: str, refusals: RefusalAudit) -> Callable[..., Any]:
    async def refuse(context: grpc.aio.ServicerContext) -> None:
        refusals.refused("admit", str(Code.CONCURRENCY_LIMITED), context.peer(), method=method)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refuse_stream_message("streams of this service", gauge.limit))

    if inspect.isasyncgenfunction(behavior):  # answers by yielding
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not gauge.enter():
                await refuse(context)
            try:
                async for item in behavior(request, context):
                    yield item
            finally:
                gauge.leave()

        return stream

    async def written(request: Any, context: grpc.aio.ServicerContext) -> Any:  # answers by context.write
        if not gauge.enter():
            await refuse(context)
        try:
            return await behavior(request, context)
        finally:
            gauge.leave()

    return written
