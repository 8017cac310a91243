"""Bytes that are not UTF-8 in a text option (argv, or the environment variable it defaults to)
end the CLI with ``toolgate: argument_not_utf8: <option> ...`` and exit 2, never a traceback,
and nothing is sent; a file name need not be UTF-8 and still works. The real CLI in
subprocesses, given raw bytes in argv, against ``toolgate serve`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from approval_helpers import APPROVER, ROOT, gateway_process
from gateway.cli._errors import EXIT
from gateway.testing import GatewayProcess, calls_recorded

ARGS = b'{"path": "report.txt", "n": 7}'
pytestmark = pytest.mark.skipif(os.name != "posix", reason="argv as bytes")


def toolgate(gw: GatewayProcess, *argv: str | bytes, key: str | bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environb, b"TOOLGATE_TARGET": gw.address.encode(), b"TOOLGATE_API_KEY": os.fsencode(key)}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *argv], capture_output=True, env=env, timeout=60,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with gateway_process(tmp_path_factory.mktemp("gw")) as gw:
        yield gw


def pending(gw: GatewayProcess) -> str:
    out = toolgate(gw, "call", "count_write", "--args", ARGS, key="demo-agent-key")
    assert out.returncode == 4, out.stdout + out.stderr
    return json.loads(out.stdout)["approval_id"]


def assert_refused(out: subprocess.CompletedProcess[bytes], option: str) -> None:
    err = out.stderr.decode()
    assert out.returncode == EXIT["argument_not_utf8"] == 2, err
    assert err.startswith(f"toolgate: argument_not_utf8: {option} ") and "not valid UTF-8 (byte 0xff" in err, err
    assert len(err.splitlines()) == 1 and out.stdout == b""  # one line, no traceback, nothing shown


@pytest.mark.parametrize(("argv", "option"), [
    (["call", "count_write", "--args", b'{"path": "r\xffport.txt", "n": 7}'], "--args"),
    (["call", "count_write", "--args", ARGS, "--run-id", b"run-\xff"], "--run-id"),
    (["call", "count_write", "--args", ARGS, "--evidence", b'{"ticket": "\xff"}'], "--evidence"),
    (["call", b"count_\xffwrite", "--args", ARGS], "TOOL"),
    (["approvals", "show", b"ap-\xff"], "APPROVAL_ID"),
    (["approvals", "list", "--status", b"pending\xff"], "--status"),
], ids=["args", "run-id", "evidence", "tool", "approval-id", "status"])
def test_a_text_option_that_is_not_utf8_is_refused_with_a_code(gateway, argv, option) -> None:
    assert_refused(toolgate(gateway, *argv, key="demo-agent-key"), option)
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0


def test_a_rejection_reason_that_is_not_utf8_is_refused_before_signing(gateway, keys: Path) -> None:
    approval_id = pending(gateway)
    out = toolgate(gateway, "approvals", "reject", approval_id, "--key", keys / "bob.pem", "--reason", b"no \xff",
                   "--yes", key=APPROVER["bob"])
    assert_refused(out, "--reason")
    shown = toolgate(gateway, "approvals", "show", approval_id, "--json", key=APPROVER["bob"])
    assert json.loads(shown.stdout)["status"] == "pending"


def test_an_api_key_from_the_environment_that_is_not_utf8_is_refused(gateway) -> None:
    out = toolgate(gateway, "tools", key=b"demo-agent-key\xff")
    assert_refused(out, "--api-key")
    assert b"environment" in out.stderr


def test_a_key_file_name_need_not_be_utf8(gateway, keys: Path) -> None:
    """A file name is bytes on POSIX: it is not refused, it is opened."""
    approval_id = pending(gateway)
    name = os.fsencode(keys) + b"/alice-\xff.pem"
    with open(name, "wb") as f:
        f.write((keys / "alice.pem").read_bytes())
    os.chmod(name, 0o600)
    out = toolgate(gateway, "approvals", "approve", approval_id, "--key", name, "--yes", key=APPROVER["alice"])
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout.splitlines()[-1])["status"] == "approved"
