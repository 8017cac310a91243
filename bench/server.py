"""The server child process: ``python -m bench.server echo|gateway --port-file F [--config F]
[--profile F] [--workers N]``.

``echo`` is a bare grpc.aio server of the same ToolGateway service that answers each
ExecuteTool with the request's args as the observation data; ``gateway`` is the real
``create_server``. The bound port is written to ``--port-file``; SIGTERM stops the server
(and writes the pyinstrument profile when ``--profile`` is given).

``--workers N`` gives both the same layout: N processes on one ``SO_REUSEPORT`` port. The
gateway runs under its own supervisor (``gateway.workers``, with ``workers: N`` in the
config); echo under a minimal one here, with the same port reservation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from pathlib import Path

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc


class EchoServicer(pb_grpc.ToolGatewayServicer):
    async def ExecuteTool(self, request: pb.ToolCallRequest, context: grpc.aio.ServicerContext) -> pb.ToolCallResponse:
        return pb.ToolCallResponse(code="ok", observation=pb.Observation(status="ok", data_json=request.args_json))


async def _start_echo(address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, int, object]:
    server = grpc.aio.server(maximum_concurrent_rpcs=4096)
    pb_grpc.add_ToolGatewayServicer_to_server(EchoServicer(), server)
    port = server.add_insecure_port(address)
    await server.start()
    return server, port, None


async def _start_gateway(config_file: str) -> tuple[grpc.aio.Server, int, object]:
    from gateway.config import Config
    from gateway.server import create_server

    config = Config.model_validate(json.loads(Path(config_file).read_text()))
    return await create_server(config, "127.0.0.1:0")


async def _main(args: argparse.Namespace) -> None:
    server, port, app = await (_start_echo() if args.kind == "echo" else _start_gateway(args.config))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tmp = Path(args.port_file + ".tmp")
    tmp.write_text(str(port))
    tmp.replace(args.port_file)
    await stop.wait()
    await server.stop(grace=1)
    if app is not None:
        await app.close()


def _write_port(port_file: str, address: str) -> None:
    tmp = Path(port_file + ".tmp")
    tmp.write_text(address.rsplit(":", 1)[1])
    tmp.replace(port_file)


def _echo_worker(address: str, _index: int, link: object) -> None:
    """A ``gateway.workers.run_workers`` target: one echo server on the shared port."""
    async def run() -> None:
        server, _, _ = await _start_echo(address)
        link.send(("ready", ""))  # type: ignore[attr-defined]
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(grace=1)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(run())


def _echo_workers(port_file: str, workers: int) -> None:
    """N echo processes on one port, under the gateway's own worker supervisor."""
    from gateway.workers import run_workers

    raise SystemExit(run_workers(workers, "127.0.0.1:0", _echo_worker, ready=lambda addr: _write_port(port_file, addr),
                                 name="echo-worker"))


def _gateway_workers(config_file: str, port_file: str, workers: int) -> None:
    from gateway.config import Config
    from gateway.workers import supervise

    config = Config.model_validate({**json.loads(Path(config_file).read_text()), "workers": workers})
    raise SystemExit(supervise(config, "127.0.0.1:0", ready=lambda addr: _write_port(port_file, addr)))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.server")
    parser.add_argument("kind", choices=["echo", "gateway"])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--config", default="")
    parser.add_argument("--profile", default="", help="write a pyinstrument text profile here on exit")
    parser.add_argument("--workers", type=int, default=1, help="server processes sharing the port")
    args = parser.parse_args()
    if args.workers > 1:
        if args.kind == "echo":
            _echo_workers(args.port_file, args.workers)
        else:
            _gateway_workers(args.config, args.port_file, args.workers)
        return
    if not args.profile:
        asyncio.run(_main(args))
        return
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    try:
        asyncio.run(_main(args))
    finally:
        profiler.stop()
        Path(args.profile).write_text(profiler.output_text(unicode=True, color=False, show_all=False))


if __name__ == "__main__":
    main()
