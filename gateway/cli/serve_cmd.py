"""``toolgate serve``: run the gateway."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import threading
from typing import Any

import structlog

from gateway.cli._errors import fail
from gateway.config import ConfigError, load_config

EXIT_GRACE_SECONDS = 5.0
"""How long the interpreter's exit may take once the gateway has stopped (``exit_when_held``)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the gateway",
        description="Start the gateway with a config file. Prints 'toolgate listening on HOST:PORT' "
        "once it accepts calls. SIGHUP reloads the policy (a broken policy keeps the old one). "
        "With 'workers: N' in the config, N gateway processes share the port (see docs/deployment.md).",
    )
    p.add_argument("--config", required=True, help="the gateway's YAML config file")
    p.add_argument("--host", default=None, help="address to bind (default: the config's listen host)")
    p.add_argument("--port", type=port_number, default=None, metavar="PORT",
                   help="port to bind, 0 to 65535; 0 picks a free one")
    p.set_defaults(func=run)


def port_number(text: str) -> int:
    """``--port``: a whole number from 0 to 65535 (argparse type)."""
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 5 else -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text[:24]!r} is not a port: give a whole number from 0 to 65535 "
                                         "(0 picks a free one)")
    return value


def bind_problem(host: str, port: str) -> str:
    """Why this process cannot listen on ``host``:``port`` ("" when it can, or when that is not
    known here: gRPC then says). Tried with a socket bound and closed at once, as gRPC binds
    (SO_REUSEADDR), so a failure is one clear line rather than gRPC's core log."""
    name = host.strip("[]")
    if not name or not port.isdigit():
        return ""
    try:
        addresses = socket.getaddrinfo(name, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, ValueError) as exc:  # a name that does not resolve, or holds a NUL
        return f"cannot listen on {host}:{port}: {host} cannot be resolved ({getattr(exc, 'strerror', None) or exc})"
    errors = []
    for address in addresses:
        error = _bind_error(address)
        if not error:
            return ""  # gRPC listens if one resolved address binds
        errors.append(error)
    return f"cannot listen on {host}:{port}: {errors[0]} (is the port in use, or the address not this machine's?)"


def _bind_error(address: tuple) -> str:
    """Why a socket cannot bind to ``address`` (a ``getaddrinfo`` entry); "" when it can."""
    family, kind, proto, _, where = address
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""


def configure_logging(worker: int | None = None) -> None:
    """The server's logs: one JSON object a line on stderr, INFO and up. A record logged with
    ``exc_info`` carries the exception and its traceback (``exception``): without it an
    unexpected error in a call left only ``{"event": "pipeline_error", "exc_info": true}``.
    ``worker``: this process's index among ``workers: N``, put on each line as ``worker``
    (``gateway.workers`` configures each worker so; the supervisor's lines have none)."""
    stamp = [] if worker is None else [_stamp_worker(worker)]
    structlog.configure(
        processors=[*stamp, structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),  # the line and its newline in one write: workers share stderr
    )


def _stamp_worker(worker: int) -> Any:
    def stamp(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
        event["worker"] = worker
        return event
    return stamp


def exit_when_held(seconds: float = EXIT_GRACE_SECONDS) -> None:
    """Called once the gateway has stopped, its store and audit log closed: end the process
    (``os._exit(0)``, after flushing stdout and stderr) should its exit take over ``seconds``.

    What could hold it there has no record left to write: a thread the interpreter joins at exit
    (a tool's ``asyncio.to_thread`` call, a library's non-daemon thread) or an exit hook that hangs.
    The python executor's threads are daemon threads and hold nothing; without this, anything
    else of the kind kept a stopped gateway alive for as long as it ran, past the pod's grace."""
    def end() -> None:
        held = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
        structlog.get_logger("toolgate.server").warning("exit_forced", waited_seconds=seconds, threads=held)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a reader gone, or a stream closed
                pass
        os._exit(0)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def run(ns: argparse.Namespace) -> int:
    try:
        config = load_config(ns.config)
    except ConfigError as exc:
        return fail("config_invalid", f"{exc}")
    host, _, port = config.listen.rpartition(":")
    host, port = ns.host or host, port if ns.port is None else str(ns.port)
    if problem := bind_problem(host, port):
        return fail("cannot_start", problem)
    address = f"{host}:{port}"
    configure_logging()
    from gateway.audit_sign import public_path
    from gateway.server import serve
    from gateway.workers import supervise, worker_audit_path

    def ready(addr: str) -> None:
        print(f"toolgate listening on {addr}", flush=True)
        audit = config.audit_path if config.workers == 1 else worker_audit_path(config.audit_path, "*")
        print(f"data dir: {config.data_path}  audit log: {audit}  workers: {config.workers}", flush=True)
        if (key := config.audit_signing_key_path) is not None:
            pub = public_path(key)  # made with a key the gateway generated; a key given may come without one
            check = (f"verify: toolgate audit verify --public-key {pub} ..." if pub.exists()
                     else f"its public key for audit verify --public-key: openssl pkey -in {key} -pubout")
            print(f"audit checkpoints signed every {config.audit.checkpoint_seconds:g} s with {key} ({check})",
                  flush=True)

    try:
        if config.workers > 1:
            return supervise(config, address, ready=ready)
        asyncio.run(serve(config, address, ready=ready, closed=exit_when_held))
    except Exception as exc:  # start-up failures: bad policy, port taken, store unreachable
        return fail("cannot_start", f"{exc}")
    return 0
