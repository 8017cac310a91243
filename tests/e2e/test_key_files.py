"""Private key files are read only when they are what they say: a regular file (a FIFO would hang
the reader), owned by this user or root, that others may neither write nor read. The gateway's
TLS key is held to it at start-up (``toolgate serve`` in a subprocess), the CLI's mTLS client key
before it connects, grant and approver keys as before (``gateway.key_files``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from gateway.cli._errors import EXIT
from gateway.key_files import KeyFileExposed, read_key_file
from tests.conftest import AGENT_KEY, DEMO_CONFIG, ROOT
from tests.e2e.test_tls import pki  # noqa: F401  (the fixture: a CA, a server and a client certificate)

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes and owners")
PEM = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"


def _key(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "k.pem"
    path.write_bytes(PEM)
    path.chmod(mode)
    return path


@posix_only
def test_a_fifo_in_place_of_a_key_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "k.pem"
    os.mkfifo(fifo, 0o600)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: outcome.append(_raised(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the reader before failing, or the test run hangs on exit
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO as a key file blocked")
    assert isinstance(outcome[0], OSError) and "not a regular file" in str(outcome[0]), outcome


def _raised(path: Path) -> BaseException:
    try:
        read_key_file(path)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return AssertionError("read")


@posix_only
@pytest.mark.skipif(os.name == "posix" and os.geteuid() != 0, reason="a root-owned key is made by root")
def test_a_non_root_reader_takes_a_root_owned_key_its_group_may_read_not_another_users(tmp_path, monkeypatch):
    """A Kubernetes Secret mounted for a non-root pod: owned by root, mode 0440, the pod's fsGroup its
    group. The reader is made uid 1000 here (``os.geteuid``)."""
    path = _key(tmp_path, 0o440)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert read_key_file(path, group_may_read=True) == PEM
    os.chown(path, 4242, -1)  # a third user's: they may rewrite it
    with pytest.raises(KeyFileExposed) as err:
        read_key_file(path, group_may_read=True)
    assert err.value.owner == 4242
    os.chown(path, 1000, -1)  # the reader's own
    assert read_key_file(path, group_may_read=True) == PEM


def test_a_file_larger_than_any_key_is_refused_without_reading_it_whole(tmp_path):
    from gateway.key_files import MAX_KEY_FILE_BYTES

    path = _key(tmp_path)
    path.write_bytes(b"x" * (MAX_KEY_FILE_BYTES + 1))
    with pytest.raises(OSError, match="no key file"):
        read_key_file(path)


def test_a_directory_in_place_of_a_key_is_refused(tmp_path):
    (tmp_path / "k.pem").mkdir()
    with pytest.raises(OSError, match="not a regular file|Is a directory"):
        read_key_file(tmp_path / "k.pem")


@posix_only
@pytest.mark.skipif(os.name == "posix" and os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_key_owned_by_another_user_is_refused_whatever_its_mode(tmp_path):
    """Its owner may always change its mode and contents: the key is theirs to replace."""
    path = _key(tmp_path)
    os.chown(path, 4242, -1)
    with pytest.raises(KeyFileExposed) as err:
        read_key_file(path, group_may_read=True)
    assert (err.value.owner, err.value.access) == (4242, "write")
    assert "owned by uid 4242, who may write it" in str(err.value)
    os.chown(path, 0, -1)
    assert read_key_file(path) == PEM


@posix_only
@pytest.mark.parametrize("mode, refused", [(0o600, False), (0o400, False), (0o640, False), (0o644, True),
                                           (0o660, True), (0o602, True)])
def test_the_gateway_starts_with_a_tls_key_only_its_user_and_group_may_read(tmp_path, pki, mode, refused):  # noqa: F811
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["data_dir"] = str(tmp_path / "data")
    raw["policy"]["bundle"] = str(ROOT / "rego")
    key = tmp_path / "server_key.pem"
    key.chmod(mode)
    raw["tls"] = {"cert_file": str(tmp_path / "server.pem"), "key_file": str(key)}
    config = tmp_path / "toolgate.yaml"
    config.write_text(yaml.safe_dump(raw))
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    if not refused:
        assert first.startswith("toolgate listening on "), (first, err)
        return
    assert first == "" and proc.returncode == EXIT["cannot_start"], (first, err)
    assert f"tls.key_file {key}: mode {mode:o} lets" in err and "pose as this gateway" in err, err
    assert f"chmod 600 {key}" in err, err


@posix_only
@pytest.mark.parametrize("mode, code", [(0o644, "tls_key_file_readable"), (0o604, "tls_key_file_readable"),
                                        (0o620, "tls_key_file_writable"), (0o640, None)])
def test_the_cli_refuses_a_client_key_others_may_read_or_write_before_connecting(tmp_path, pki, mode, code):  # noqa: F811
    key = tmp_path / "client_key.pem"
    key.chmod(mode)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "tools", "--target", "127.0.0.1:9", "--api-key", AGENT_KEY,
         "--ca-file", str(tmp_path / "ca.pem"), "--client-cert", str(tmp_path / "client.pem"), "--client-key", str(key)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=clean)
    if code is None:  # its group may read it (a Secret mounted 0440 for the client's group): on to connecting
        assert "tls_key_file" not in out.stderr and out.returncode == 6, out
        return
    assert out.returncode == EXIT[code] == 2, out
    assert out.stderr.startswith(f"toolgate: {code}: --client-key {key}: mode {mode:o} lets"), out.stderr
    assert f"chmod 600 {key}" in out.stderr


@posix_only
@pytest.mark.skipif(os.name == "posix" and os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_approver_cli_refuses_a_key_another_user_owns_before_connecting(tmp_path):
    key = tmp_path / "alice.pem"
    key.write_bytes((ROOT / "examples" / "keys" / "alice.pem").read_bytes())
    key.chmod(0o600)
    os.chown(key, 4242, -1)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "approvals", "approve", "appr_x", "--key", str(key), "--yes",
         "--target", "127.0.0.1:9", "--api-key", "x"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=clean)
    assert out.returncode == EXIT["key_file_writable"] == 2, out
    assert out.stderr.startswith(f"toolgate: key_file_writable: {key}: it is owned by uid 4242, not by you"), out.stderr
