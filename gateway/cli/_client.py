"""What the client verbs share: target and API key options, a channel, error reporting."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import grpc

from gateway.terminal import shown

EXIT_TRANSPORT = 6
EXIT_REFUSED = 3
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=os.environ.get("TOOLGATE_TARGET", "127.0.0.1:50051"),
                   help="gateway address (env TOOLGATE_TARGET, default 127.0.0.1:50051)")
    p.add_argument("--api-key", default=os.environ.get("TOOLGATE_API_KEY", ""),
                   help="API key (env TOOLGATE_API_KEY)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the gateway")


def channel(ns: argparse.Namespace) -> grpc.Channel:
    return grpc.insecure_channel(ns.target)


def metadata(ns: argparse.Namespace) -> list[tuple[str, str]]:
    return [("x-api-key", ns.api_key)] if ns.api_key else []


def report_rpc_error(exc: grpc.RpcError) -> int:
    """``toolgate: <status name>: <details> (hint)`` on stderr; exit 6. The details are the
    server's words (or a proxy's): printed escaped."""
    code = exc.code() if hasattr(exc, "code") else None
    name = code.name.lower() if code else "unknown"
    hint = {
        "unauthenticated": "check --api-key / TOOLGATE_API_KEY",
        "unavailable": "is the gateway running at --target?",
        "permission_denied": "this API key lacks the role for that verb",
    }.get(name, "")
    details = exc.details() if hasattr(exc, "details") else str(exc)
    print(f"toolgate: {name}: {shown(str(details))}" + (f" ({hint})" if hint else ""), file=sys.stderr)
    return EXIT_TRANSPORT


def report_refusal(exc: grpc.RpcError) -> int:
    """A FAILED_PRECONDITION from the gateway: its details are ``{"code": ..., "message": ...}``
    (gateway.approvals.servicer); print ``toolgate: <code>: <message>`` escaped; exit 3."""
    details = str(exc.details() or "")
    try:
        body = json.loads(details)
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "refused", details
    if not _CODE.match(code):  # not a code: say so, and show it as part of the message
        code, message = "refused", details
    print(f"toolgate: {code}: {shown(message)}", file=sys.stderr)
    return EXIT_REFUSED
