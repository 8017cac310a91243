"""What the client verbs share: target and API key options, a channel, error reporting."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import grpc
from cryptography import x509

from gateway.cli._errors import CliError
from gateway.channel_checks import api_key_problem, client_pair_problem, on_this_machine
from gateway.key_files import KeyFileExposed, read_key_file
from gateway.terminal import shown

EXIT_TRANSPORT = 6
EXIT_REFUSED = 3
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
MAX_TIMEOUT = 365 * 24 * 3600
"""The longest ``--timeout`` (a year, in seconds): gRPC takes a deadline much further away for
one already passed, and ends the call at once."""
REFUSED_STATUSES = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.ABORTED, grpc.StatusCode.UNIMPLEMENTED,
})
"""Statuses that mean the gateway answered and refused what was asked (exit 3). The others mean it
could not be reached or could not answer, or refused the credentials (exit 6)."""
_STATUS_HINTS = {
    "unauthenticated": "check --api-key / TOOLGATE_API_KEY",
    "unavailable": "is the gateway running at --target?",
    "permission_denied": "this API key lacks the role for that verb",
}
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")
_SCHEMES = ("unix:", "unix-abstract:")
_MAX_REFUSAL_DETAILS = 64 * 1024
"""Details longer than this are not read as the gateway's ``{"code", "message"}``: shown as they are."""


def add_target_options(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--target", default=env("TOOLGATE_TARGET", "127.0.0.1:50051"),
                   help="gateway address (env TOOLGATE_TARGET, default 127.0.0.1:50051)")
    p.add_argument("--api-key", default=env("TOOLGATE_API_KEY", ""),
                   help="API key (env TOOLGATE_API_KEY)")
    p.add_argument("--timeout", type=timeout_seconds, default=60.0, metavar="SECONDS",
                   help=f"seconds to wait for the gateway (more than 0, at most {MAX_TIMEOUT}; default 60)")
    p.add_argument("--ca-file", default=env("TOOLGATE_CA_FILE", ""),
                   help="talk TLS, trusting this CA (PEM) for the gateway's certificate (env TOOLGATE_CA_FILE)")
    p.add_argument("--tls", action="store_true", help="talk TLS, trusting the usual public CAs")
    p.add_argument("--client-cert", default=env("TOOLGATE_CLIENT_CERT", ""),
                   help="client certificate (PEM) for a gateway that asks for one (mTLS; env TOOLGATE_CLIENT_CERT)")
    p.add_argument("--client-key", default=env("TOOLGATE_CLIENT_KEY", ""),
                   help="its private key (PEM; env TOOLGATE_CLIENT_KEY)")
    p.add_argument("--insecure", action="store_true",
                   help="allow plaintext to a gateway that is not on this machine (the API key travels unencrypted)")


def timeout_seconds(text: str) -> float:
    """``--timeout``: seconds, more than 0 and at most ``MAX_TIMEOUT`` (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        raise argparse.ArgumentTypeError(f"{text[:24]!r} is not a number of seconds more than 0 and at most "
                                         f"{MAX_TIMEOUT} (e.g. 60)")
    return value


_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
"""One approval request may hold arguments past gRPC's default 4 MiB (``limits.max_args_bytes``)."""


def target_problem(target: str) -> str:
    """Why ``target`` is no gateway address ("" when it is one): HOST:PORT (a name, an IPv4
    address or an [IPv6] address, a port 1-65535), dns:[//AUTHORITY/]HOST:PORT, or unix:PATH /
    unix-abstract:NAME."""
    if target.startswith(_SCHEMES):
        rest = target.split(":", 1)[1]
        return "" if rest and not any(c.isspace() or not c.isprintable() for c in rest) else "names no socket"
    if target.startswith("dns:"):  # gRPC's dns:[//AUTHORITY/]HOST:PORT
        target = target[len("dns:"):]
        if target.startswith("//"):
            target = target[2:].partition("/")[2]
    found = _HOST_PORT.fullmatch(target)
    if not found:
        return "is not HOST:PORT"
    return "" if 1 <= int(found["port"]) <= 65535 else "has a port outside 1-65535"


def channel(ns: argparse.Namespace) -> grpc.Channel:
    """TLS when a CA, ``--tls`` or a client certificate is given; else plaintext, which is only
    for a gateway on this machine (a sidecar on loopback or a Unix socket) unless ``--insecure``:
    the API key goes in every call's metadata."""
    if problem := target_problem(ns.target):
        raise CliError("invalid_target", f"--target {ns.target[:100]!r} {problem}: give HOST:PORT (e.g. "
                       "127.0.0.1:50051, [::1]:50051, gateway.example:443) or unix:PATH")
    if problem := client_pair_problem(ns.client_key, ns.client_cert):
        raise CliError("client_cert_incomplete", f"--client-key / --client-cert: {problem}")
    if ns.ca_file or ns.tls or ns.client_cert:
        root = _certificates("--ca-file", ns.ca_file, "tls_ca_file_invalid")
        cert = _certificates("--client-cert", ns.client_cert, "tls_client_cert_invalid")
        key = _client_key(ns.client_key)
        return grpc.secure_channel(ns.target, grpc.ssl_channel_credentials(root, key, cert), options=_OPTIONS)
    if not ns.insecure and not on_this_machine(ns.target):
        raise CliError("insecure_target", f"{ns.target} is not on this machine, and plaintext would send the API key "
                       "unencrypted: give --ca-file (or --tls) to talk TLS, or --insecure to send it anyway")
    return grpc.insecure_channel(ns.target, options=_OPTIONS)


def _certificates(flag: str, path: str, invalid: str) -> bytes | None:
    """The PEM certificates in ``path`` (None when no file is given); refused with the code
    ``invalid`` when it holds none: gRPC would only fail each connection, saying ``unavailable``."""
    if not path:
        return None
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise CliError("tls_file_unreadable", f"{flag} {path}: cannot be read: {exc.strerror or exc}") from None
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise CliError(invalid, f"{flag} {path}: holds no PEM certificate (-----BEGIN CERTIFICATE-----): "
                       "give the certificate file itself, in PEM") from None
    return pem


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


def rpc_status(exc: grpc.RpcError) -> grpc.StatusCode:
    """The call's status (UNKNOWN for an error that carries none)."""
    code = exc.code() if hasattr(exc, "code") else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def gateway_refusal(exc: grpc.RpcError) -> tuple[str, str] | None:
    """(code, message) when the details are the gateway's ``{"code": ..., "message": ...}``
    (``gateway.approvals.servicer``) with a snake_case code; None for other details."""
    details = str(exc.details() or "") if hasattr(exc, "details") else ""
    if not details.startswith("{") or len(details) > _MAX_REFUSAL_DETAILS:  # the gateway's are small objects
        return None
    try:
        body = json.loads(details)
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError, RecursionError):  # anyone on the way may send any details
        return None
    return (code, message) if _CODE.match(code) else None


def report_rpc_error(exc: grpc.RpcError, hints: dict[str, str] | None = None, fallback: str = "") -> int:
    """``toolgate: <code>: <message> (hint)`` on stderr, escaped (the details are the server's
    words, or a proxy's). The code and message are the gateway's when its details carry them
    (``gateway_refusal``), else ``fallback`` (or the status name) and the details. The hint is the
    caller's for that code, else one for the status. Exit 3 for a ``REFUSED_STATUSES``, else 6."""
    status = rpc_status(exc)
    said = gateway_refusal(exc)
    if said:
        code, message = said
    else:
        details = exc.details() if hasattr(exc, "details") else str(exc)
        code, message = fallback or status.name.lower(), str(details or "")
    hint = (hints or {}).get(code) or _closed_hint(code, message) or _STATUS_HINTS.get(code, "")
    print(f"toolgate: {code}: {shown(message)}" + (f" ({hint})" if hint else ""), file=sys.stderr)
    return EXIT_REFUSED if status in REFUSED_STATUSES else EXIT_TRANSPORT


def _closed_hint(code: str, message: str) -> str:
    """The hint for a connection the gateway closed at once: what a TLS port does to a plaintext
    client, and an mTLS port to a client without a certificate (gRPC says only "Socket closed")."""
    if code != "unavailable" or "socket closed" not in message.lower():
        return ""
    return ("the gateway closed the connection: if it serves TLS, give --ca-file (or --tls); if it asks for "
            "client certificates (mTLS), give --client-cert and --client-key too")


def report_refusal(exc: grpc.RpcError, hints: dict[str, str] | None = None) -> int:
    """A FAILED_PRECONDITION from the gateway (its details ``{"code": ..., "message": ...}``):
    ``report_rpc_error``, with the code ``refused`` when it gave none; exit 3."""
    return report_rpc_error(exc, hints, fallback="refused")
