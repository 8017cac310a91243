"""Checks on how a client reaches a gateway, shared by the ``toolgate`` CLI and ``runtime_client``
so both refuse the same targets and credentials. A leaf module (the standard library only):
``runtime_client`` imports it from here, and the gateway imports nothing of ``runtime_client``
for it, so the dependency goes one way.

- ``on_this_machine``: whether plaintext to a target keeps the API key on this machine.
- ``api_key_problem``: why gRPC metadata cannot carry an API key.
- ``client_pair_problem``: why a client key and certificate cannot be used together.
"""

from __future__ import annotations

import ipaddress


def on_this_machine(target: str) -> bool:
    """A loopback address, ``localhost`` or a Unix socket (``unix:``), port or not."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    host = target.rsplit(":", 1)[0] if target.count(":") == 1 or target.startswith("[") else target
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key_problem(api_key: str) -> str:
    """Why gRPC metadata cannot carry ``api_key`` ("" when it can): printable ASCII only."""
    if all(" " <= c <= "~" for c in api_key):
        return ""
    return "the API key holds a control character or a character beyond ASCII, which gRPC metadata cannot carry: " \
           "check it for a stray character"


def client_pair_problem(key: str, cert: str) -> str:
    """Why a client key and certificate (file names, "" for none) cannot be used: one without the other
    ("" when both or neither are given). gRPC would take either alone, and then send no certificate."""
    if bool(key) == bool(cert):
        return ""
    return "a client certificate needs its private key, and a key its certificate: give both, or neither"
