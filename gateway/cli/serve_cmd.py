"""``toolgate serve``: run the gateway."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import structlog

from gateway.cli._errors import fail
from gateway.config import ConfigError, load_config


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
    p.add_argument("--port", type=int, default=None, help="port to bind; 0 picks a free one")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    try:
        config = load_config(ns.config)
    except ConfigError as exc:
        return fail("config_invalid", f"{exc}")
    host, _, port = config.listen.rpartition(":")
    address = f"{ns.host or host}:{port if ns.port is None else ns.port}"
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
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
        asyncio.run(serve(config, address, ready=ready))
    except Exception as exc:  # start-up failures: bad policy, port taken, store unreachable
        return fail("cannot_start", f"{exc}")
    return 0
