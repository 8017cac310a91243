"""The gRPC server: ``create_server(config, address) -> (server, port, app)``.

Every method is a registered method handler, found by one dict lookup per call; grpc.aio asks
the generic handlers only for a method not registered, and ``UnknownMethods``, the last of
them, answers every such call: audited through the server's ``RefusalAudit`` (the caller may
hold no key), then UNIMPLEMENTED, as grpc itself would answer."""

from __future__ import annotations

import asyncio
import signal
import stat
from pathlib import Path
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway import metrics, tracing
from gateway.app import GatewayApp
from gateway.audit import caller_text
from gateway.auth import AuthenticatedServer, RefusalAudit
from gateway.codes import Code
from gateway.config import Config
from gateway.edge_limits import CappedStreams
from gateway.servicer import ToolGatewayServicer
from gateway.tls_files import load_tls_files

log = structlog.get_logger("toolgate.server")


async def create_server(config: Config, address: str | None = None, *, app: GatewayApp | None = None):
    """Build and start a server; ``address`` may use port 0. Returns (server, port, app)."""
    if app is not None:
        return await _start(config, address, app)
    app = GatewayApp(config)
    try:
        return await _start(config, address, app)
    except BaseException:
        await app.close(grace=0)  # its audit log's lock too: another start in this process may take it
        raise


async def _start(config: Config, address: str | None, app: GatewayApp):
    metrics.configure(config, store=app.store)  # observability: both off unless config.observability
    tracing.configure(config)
    # no maximum_concurrent_rpcs: it would count the streams anyone may hold open (gateway.edge_limits)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", config.limits.max_args_bytes * 2 + 65536),
            # gRPC binds with SO_REUSEPORT unless told not to: a second gateway on a port in use
            # would start and take half its connections. Only workers share a port (gateway.workers).
            ("grpc.so_reuseport", 0 if app.worker is None else 1),
        ],
    )
    refusals = app.refusals  # of callers that may hold no key: one allowance for the server
    # every toolgate.v1 method authenticates
    secured = AuthenticatedServer(server, app.authenticator, app.audit, refusals)
    pb_grpc.add_ToolGatewayServicer_to_server(ToolGatewayServicer(app), secured)
    _add_approvals(secured, app)
    public = CappedStreams(server, config.limits.max_public_streams, refusals)  # no key needed: streams counted
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, public)
    names = [pb.DESCRIPTOR.services_by_name[n].full_name for n in ("ToolGateway", "Approvals")]
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # enable_server_reflection wants the server itself
        reflection.aio.ReflectionServicer([*names, health.SERVICE_NAME, reflection.SERVICE_NAME]), public)
    server.add_generic_rpc_handlers((UnknownMethods(refusals),))  # last: asked only when nothing else answers
    port = _bind(server, config, address or config.listen)
    await server.start()
    app.start_sweeper()  # idempotency outcomes past their retention
    app.start_checkpoints()  # signed audit checkpoints, when audit.signing_key is set
    app.start_version_refresh()  # the opa engine: the version of what OPA serves, asked now and every 30 s
    for name in ("", *names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port, app


class UnknownMethods(grpc.GenericRpcHandler):
    """Answers a call to a method no service has: audited (``request``, ``unknown_method``, the
    method the caller named as ``caller_text``, the peer), then UNIMPLEMENTED. A stream-stream
    handler, so it answers at once whatever kind of call it is; it reads nothing."""

    def __init__(self, refusals: RefusalAudit) -> None:
        self._refusals = refusals

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        named = caller_text("method", handler_call_details.method)

        async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
            self._refusals.refused("request", str(Code.UNKNOWN_METHOD), context.peer(), **named)
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

        return grpc.stream_stream_rpc_method_handler(refuse)


def _add_approvals(server: AuthenticatedServer, app: GatewayApp) -> None:
    try:
        from gateway.approvals.servicer import add_approvals_service
    except ModuleNotFoundError:
        return
    add_approvals_service(server, app)


def _bind(server: grpc.aio.Server, config: Config, address: str) -> int:
    try:
        port = _add_port(server, config, address)
    except RuntimeError:  # grpcio's "Failed to bind": the reason is only in its core log
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address} (is the port in use, or the address not this machine's?)")
    return port


def _add_port(server: grpc.aio.Server, config: Config, address: str) -> int:
    if config.tls is None:
        return server.add_insecure_port(address)
    files = load_tls_files(config)  # unusable files named here, not as a failed bind
    creds = grpc.ssl_server_credentials(
        [(files.key, files.chain)], root_certificates=files.client_ca, require_client_auth=files.client_ca is not None)
    return server.add_secure_port(address, creds)


async def serve(config: Config, address: str | None = None, *, ready=None, worker: int | None = None,
                closed=None) -> None:
    """Run until SIGINT/SIGTERM; SIGHUP reloads the policy. ``worker``: see gateway.workers.
    Logs ``stopping`` when told to stop and ``stopped`` once the store and the audit log are
    closed, then calls ``closed()`` (the process's own business: ``serve_cmd.exit_when_held``)."""
    app = GatewayApp(config, worker=worker)
    try:
        server, port, app = await create_server(config, address, app=app)
    except BaseException:
        await app.close(grace=0)
        raise
    host = (address or config.listen).rsplit(":", 1)[0]
    if ready is not None:
        ready(f"{host}:{port}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    told: list[str] = []

    def stop_on(sig: signal.Signals) -> None:
        told.append(sig.name)
        stop.set()

    loop.add_signal_handler(signal.SIGHUP, app.reload_policy_soon)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_on, sig)
    watcher = asyncio.create_task(_watch_policy(app)) if config.policy.reload_on_change else None
    try:
        await stop.wait()
    finally:
        if watcher:
            watcher.cancel()
        began, grace = loop.time(), 5.0
        log.info("stopping", reason=told[0] if told else "", grace_seconds=grace, in_flight=app.pipeline.in_flight.open)
        await shutdown(server, app, grace=grace)
        log.info("stopped", seconds=round(loop.time() - began, 3))
        if closed is not None:
            closed()


async def shutdown(server: grpc.aio.Server, app: GatewayApp, grace: float) -> None:
    """Stop serving and close: the calls' grace and the tools' (a tool whose caller went away runs
    off any RPC: ``Pipeline.drain``) run together, so the whole takes ``grace`` and the stopped
    tools' results, never 2 × ``grace``; then the store and the audit log close, at once."""
    await asyncio.gather(server.stop(grace=grace), app.pipeline.drain(grace))
    await app.close(grace=0)  # drained: what is left did not stop when told


async def _watch_policy(app: GatewayApp, interval: float = 2.0, settle: float = 0.25) -> None:
    """Poll the bundle folder's files and reload when any changes, once they have stopped
    changing for ``settle`` seconds (a deploy writing several files is read whole, not half-way).

    It never stops on its own: a file gone between listing and reading (an editor's swap
    file) is left out of that look, and anything else going wrong is logged and looked at again
    at the next poll; a stopped watcher would keep the old policy serving for good, unsaid."""
    folder = app.config.policy_bundle_path
    last = bundle_stamp(folder)
    while True:
        await asyncio.sleep(interval)
        try:
            now = await asyncio.to_thread(bundle_stamp, folder)  # a walk of the folder: off the event loop
            if now == last:
                continue
            for _ in range(40):  # at most ~10 s of a folder still being written
                await asyncio.sleep(settle)
                now, before = await asyncio.to_thread(bundle_stamp, folder), now
                if now == before:
                    break
            last = now
            await app.reload_policy()  # audits its own failure, and keeps the old policy
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive whatever went wrong
            log.error("policy_watch_failed", folder=str(folder), error=f"{type(exc).__name__}: {exc}"[:500])


def bundle_stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of each regular file under ``folder``, sorted; a file that is gone
    (or cannot be read) by the time it is looked at is left out, and a folder gone while it was
    walked marks the stamp as partial."""
    found = []
    try:
        for path in folder.rglob("*"):
            try:
                info = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append((str(path), info.st_mtime_ns, info.st_size))
    except OSError:  # a folder gone while it was walked (a deploy swapping versions): look again later
        found.append(("", -1, -1))  # a stamp no whole look gives: the next one differs from it
    return tuple(sorted(found))
