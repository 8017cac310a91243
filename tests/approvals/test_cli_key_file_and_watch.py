"""The approver's CLI refuses a key file others may write, and ``approvals watch --until S``
fails when the stream ends before an event with status S. The real CLI in subprocesses
against ``toolgate serve`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from approval_helpers import APPROVER, ROOT, write_config
from gateway.testing import GatewayProcess, calls_recorded

KEYS = ROOT / "examples" / "keys"


def toolgate(gw: GatewayProcess, *argv: str, key: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLGATE_TARGET": gw.address, "TOOLGATE_API_KEY": key}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT)


def pending(gw: GatewayProcess) -> str:
    out = toolgate(gw, "call", "count_write", "--args", '{"path": "report.txt", "n": 7}', key="demo-agent-key")
    assert out.returncode == 4, out.stdout + out.stderr
    return json.loads(out.stdout)["approval_id"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gw")
    gw = GatewayProcess(write_config(tmp), data_dir=tmp / "data").start()
    gw.tmp = tmp
    try:
        yield gw
    finally:
        gw.stop()


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("mode", [0o666, 0o620], ids=["world-writable", "group-writable"])
def test_approve_refuses_a_key_file_others_may_write(gateway, tmp_path: Path, mode: int) -> None:
    approval_id = pending(gateway)
    key = tmp_path / "alice.pem"
    key.write_bytes((KEYS / "alice.pem").read_bytes())
    key.chmod(mode)
    out = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(key), "--yes", key=APPROVER["alice"])
    assert out.returncode == 2 and "key_file_writable" in out.stderr and "chmod 600" in out.stderr, out.stderr
    shown = toolgate(gateway, "approvals", "show", approval_id, "--json", key=APPROVER["alice"])
    assert json.loads(shown.stdout)["status"] == "pending"  # nothing was signed
    key.chmod(0o600)  # the same key, kept private, signs
    done = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(key), "--yes", key=APPROVER["alice"])
    assert done.returncode == 0, done.stderr


def test_watch_until_a_status_that_never_comes_fails(gateway) -> None:
    approval_id = pending(gateway)
    out = toolgate(gateway, "approvals", "watch", approval_id, "--include-current", "--until", "approved",
                   "--timeout", "2", key=APPROVER["alice"])
    assert json.loads(out.stdout.splitlines()[0])["approval"]["status"] == "pending"
    assert out.returncode == 1 and "watch_ended" in out.stderr and "'approved'" in out.stderr, out.stderr
    ok = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(KEYS / "alice.pem"), "--yes",
                  key=APPROVER["alice"])
    assert ok.returncode == 0, ok.stderr
    reached = toolgate(gateway, "approvals", "watch", approval_id, "--include-current", "--until", "approved",
                       "--timeout", "10", key=APPROVER["alice"])
    assert reached.returncode == 0, reached.stderr
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0
