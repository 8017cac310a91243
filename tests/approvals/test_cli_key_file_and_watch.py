"""The approver's CLI refuses a key file others may write, or read unless it is encrypted;
``keys new`` writes keys 0600 whatever the umask; and ``approvals watch --until S`` fails when
the stream ends before an event with status S. The real CLI in subprocesses against
``toolgate serve`` in a subprocess."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from approval_helpers import APPROVER, KEYS, ROOT, gateway_process, pending, toolgate
from gateway.approvals.keyring import key_labels, load_private_key, write_private_key
from gateway.cli._errors import EXIT
from gateway.testing import calls_recorded




@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with gateway_process(tmp_path_factory.mktemp("gw")) as gw:
        yield gw


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize(("mode", "code"), [
    (0o666, "key_file_writable"), (0o620, "key_file_writable"),
    (0o644, "key_file_readable"), (0o640, "key_file_readable"), (0o604, "key_file_readable"),
], ids=["world-writable", "group-writable", "world-readable", "group-readable", "others-readable"])
def test_approve_refuses_a_key_file_others_may_write_or_read(gateway, tmp_path: Path, mode: int, code: str) -> None:
    approval_id = pending(gateway)
    key = tmp_path / "alice.pem"  # unencrypted: readable by others is as bad as writable
    key.write_bytes((KEYS / "alice.pem").read_bytes())
    key.chmod(mode)
    out = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(key), "--yes", key=APPROVER["alice"])
    assert out.returncode == EXIT[code] == 2, out.stderr
    assert out.stderr.startswith(f"toolgate: {code}: {key}: "), out.stderr
    assert f"mode {mode:o}" in out.stderr and f"chmod 600 {key}" in out.stderr
    assert code == "key_file_writable" or "passphrase" in out.stderr
    assert out.stdout == ""  # refused before fetching the request: nothing shown, signed or sent
    shown = toolgate(gateway, "approvals", "show", approval_id, "--json", key=APPROVER["alice"])
    assert json.loads(shown.stdout)["status"] == "pending"
    key.chmod(0o600)  # the same key, kept private, signs
    done = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(key), "--yes", key=APPROVER["alice"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "approved"


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_approve_accepts_an_encrypted_key_file_others_may_read(gateway, tmp_path: Path, monkeypatch) -> None:
    approval_id = pending(gateway)
    pem = (KEYS / "alice.pem").read_bytes()
    key = tmp_path / "alice-encrypted.pem"
    write_private_key(key, load_private_key(pem), b"s3cret", key_labels(pem))
    key.chmod(0o644)  # a copy is no use without the passphrase
    monkeypatch.setenv("TOOLGATE_TEST_PASSPHRASE", "s3cret")
    done = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(key),
                    "--passphrase-env", "TOOLGATE_TEST_PASSPHRASE", "--yes", key=APPROVER["alice"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "approved"


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o000, 0o022], ids=["umask-000", "umask-022"])
def test_keys_new_writes_the_key_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "keys", "new", "--approver", "dora", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT, umask=umask)
    assert out.returncode == 0, out.stderr
    (key,) = tmp_path.glob("dora-*.pem")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_watch_until_a_status_that_never_comes_fails(gateway, keys: Path) -> None:
    approval_id = pending(gateway)
    out = toolgate(gateway, "approvals", "watch", approval_id, "--include-current", "--until", "approved",
                   "--timeout", "2", key=APPROVER["alice"])
    assert json.loads(out.stdout.splitlines()[0])["approval"]["status"] == "pending"
    assert out.returncode == 1 and "watch_ended" in out.stderr and "'approved'" in out.stderr, out.stderr
    ok = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes",
                  key=APPROVER["alice"])
    assert ok.returncode == 0, ok.stderr
    reached = toolgate(gateway, "approvals", "watch", approval_id, "--include-current", "--until", "approved",
                       "--timeout", "10", key=APPROVER["alice"])
    assert reached.returncode == 0, reached.stderr
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0
