"""The target and credential checks the CLI and runtime_client share live in the gateway
(``gateway.channel_checks``): runtime_client imports them from there, and the CLI's client
plumbing imports nothing of runtime_client, so the dependency goes one way."""

from __future__ import annotations

import subprocess
import sys

import runtime_client._client as rc_client
from gateway import channel_checks


def test_runtime_client_uses_the_gateways_channel_checks() -> None:
    for name in ("api_key_problem", "client_pair_problem", "on_this_machine"):
        assert getattr(rc_client, name) is getattr(channel_checks, name)


def test_the_cli_client_plumbing_imports_nothing_of_runtime_client() -> None:
    code = ("import sys, gateway.cli._client, gateway.cli.approvals_cmd; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'runtime_client'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
