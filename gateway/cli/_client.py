"""What the client verbs share: target and API key options, a channel, error reporting."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import grpc

from gateway.cli._errors import CliError
from gateway.channel_checks import api_key_problem, client_pair_problem, on_this_machine
from gateway.key_files import KeyFileExposed, read_key_file
from gateway.terminal import shown

EXIT_TRANSPORT = 6
EXIT_REFUSED = 3
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")


def add_target_options(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--target", default=env("TOOLGATE_TARGET", "127.0.0.1:50051"),
                   help="gateway address (env TOOLGATE_TARGET, default 127.0.0.1:50051)")
    p.add_argument("--api-key", default=env("TOOLGATE_API_KEY", ""),
                   help="API key (env TOOLGATE_API_KEY)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the gateway")
    p.add_argument("--ca-file", default=env("TOOLGATE_CA_FILE", ""),
                   help="talk TLS, trusting this CA (PEM) for the gateway's certificate (env TOOLGATE_CA_FILE)")
    p.add_argument("--tls", action="store_true", help="talk TLS, trusting the usual public CAs")
    p.add_argument("--client-cert", default=env("TOOLGATE_CLIENT_CERT", ""),
                   help="client certificate (PEM) for a gateway that asks for one (mTLS; env TOOLGATE_CLIENT_CERT)")
    p.add_argument("--client-key", default=env("TOOLGATE_CLIENT_KEY", ""),
                   help="its private key (PEM; env TOOLGATE_CLIENT_KEY)")
    p.add_argument("--insecure", action="store_true",
                   help="allow plaintext to a gateway that is not on this machine (the API key travels unencrypted)")


_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
"""One approval request may hold arguments past gRPC's default 4 MiB (``limits.max_args_bytes``)."""


def channel(ns: argparse.Namespace) -> grpc.Channel:
    """TLS when a CA, ``--tls`` or a client certificate is given; else plaintext, which is only
    for a gateway on this machine (a sidecar on loopback or a Unix socket) unless ``--insecure``:
    the API key goes in every call's metadata."""
    if problem := client_pair_problem(ns.client_key, ns.client_cert):
        raise CliError("client_cert_incomplete", f"--client-key / --client-cert: {problem}")
    if ns.ca_file or ns.tls or ns.client_cert:
        root, cert = (_tls_file(flag, path) for flag, path in (("--ca-file", ns.ca_file), ("--client-cert", ns.client_cert)))
        key = _client_key(ns.client_key)
        return grpc.secure_channel(ns.target, grpc.ssl_channel_credentials(root, key, cert), options=_OPTIONS)
    if not ns.insecure and not on_this_machine(ns.target):
        raise CliError("insecure_target", f"{ns.target} is not on this machine, and plaintext would send the API key "
                       "unencrypted: give --ca-file (or --tls) to talk TLS, or --insecure to send it anyway")
    return grpc.insecure_channel(ns.target, options=_OPTIONS)


def _tls_file(flag: str, path: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError("tls_file_unreadable", f"{flag} {path}: cannot be read: {exc.strerror or exc}") from None


def _client_key(path: str) -> bytes | None:
    """The mTLS client key (``read_key_file``): whoever can read it can connect as this client, so
    others may not; its group may (a Secret volume mounted 0440 for the client's group)."""
    if not path:
        return None
    try:
        return read_key_file(path, group_may_read=True)  # a root-owned Secret mounted 0440 for the agent's group
    except KeyFileExposed as exc:
        code = "tls_key_file_writable" if exc.access == "write" else "tls_key_file_readable"
        raise CliError(code, f"--client-key {exc}, and whoever can read it can connect as you; {exc.remedy}") from None
    except OSError as exc:
        raise CliError("tls_file_unreadable", f"--client-key {path}: cannot be read: {exc.strerror or exc}") from None


def metadata(ns: argparse.Namespace) -> list[tuple[str, str]]:
    """The call's metadata: the API key, which gRPC can carry only as printable ASCII."""
    if not ns.api_key:
        return []
    if problem := api_key_problem(ns.api_key):
        raise CliError("api_key_invalid", f"--api-key (or TOOLGATE_API_KEY): {problem}")
    return [("x-api-key", ns.api_key)]


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


def report_refusal(exc: grpc.RpcError, hints: dict[str, str] | None = None) -> int:
    """A FAILED_PRECONDITION from the gateway: its details are ``{"code": ..., "message": ...}``
    (gateway.approvals.servicer); print ``toolgate: <code>: <message>`` escaped, then the
    caller's hint for that code, if any; exit 3."""
    details = str(exc.details() or "")
    try:
        body = json.loads(details)
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "refused", details
    if not _CODE.match(code):  # not a code: say so, and show it as part of the message
        code, message = "refused", details
    hint = (hints or {}).get(code, "")
    print(f"toolgate: {code}: {shown(message)}" + (f" ({hint})" if hint else ""), file=sys.stderr)
    return EXIT_REFUSED
