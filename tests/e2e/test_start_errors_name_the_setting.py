"""A gateway that cannot start says which setting and which file: ``cannot_start`` was a bare
``[Errno 2] No such file or directory``, ``[Errno 98] Address already in use`` or cryptography's
"Unable to load PEM file" for the TLS files, the metrics port and the grant keys. Real
``toolgate serve`` processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from gateway.cli._errors import EXIT
from tests.conftest import DEMO_CONFIG, ROOT
from tests.e2e.test_tls import pki  # noqa: F401  (the fixture: a CA, a server and a client certificate)


def _refusal(tmp_path: Path, **changes: Any) -> str:
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["data_dir"] = str(tmp_path / "data")
    raw["policy"]["bundle"] = str(ROOT / "rego")
    for key, value in changes.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    config = tmp_path / "toolgate.yaml"
    config.write_text(yaml.safe_dump(raw))
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "listening" not in done.stdout and done.returncode == EXIT["cannot_start"], done
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("toolgate: cannot_start: "), done.stderr
    return line


def _tls(tmp_path: Path, **files: str) -> dict[str, str]:
    return {"cert_file": str(tmp_path / "server.pem"), "key_file": str(tmp_path / "server_key.pem"), **files}


def test_a_missing_tls_certificate(tmp_path, pki):  # noqa: F811
    gone = tmp_path / "gone.pem"
    assert f"tls.cert_file {gone}: No such file or directory" in _refusal(tmp_path, tls=_tls(tmp_path, cert_file=str(gone)))


def test_a_folder_as_the_tls_certificate(tmp_path, pki):  # noqa: F811
    line = _refusal(tmp_path, tls=_tls(tmp_path, cert_file=str(tmp_path)))
    assert f"tls.cert_file {tmp_path}: " in line, line


def test_a_missing_client_ca(tmp_path, pki):  # noqa: F811
    gone = tmp_path / "ca-gone.pem"
    line = _refusal(tmp_path, tls=_tls(tmp_path, client_ca_file=str(gone)))
    assert f"tls.client_ca_file {gone}: No such file or directory" in line, line


def test_a_metrics_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _refusal(tmp_path, observability={"metrics_port": port, "metrics_host": "127.0.0.1"})
    assert f"observability.metrics_port: cannot listen on 127.0.0.1:{port}: Address already in use" in line, line


def test_a_grant_key_that_is_not_pem(tmp_path):
    key = tmp_path / "data" / "grant-signing.pem"
    key.parent.mkdir()
    key.write_text("not a key\n")
    key.chmod(0o600)
    line = _refusal(tmp_path)
    assert f"approvals.grant_keys: {key} is not an unencrypted Ed25519 private key in PEM" in line, line
    assert "toolgate keys grant --out FILE" in line


def test_a_second_grant_key_missing(tmp_path):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    keys = [*raw["approvals"]["grant_keys"], "old-grant.pem"]
    line = _refusal(tmp_path, approvals={"grant_keys": keys})
    assert f"approvals.grant_keys: {tmp_path / 'data' / 'old-grant.pem'}: No such file or directory" in line, line



# gRPC takes TLS files as bytes and finds them unusable only when binding: its core logged "Unable
# to create secure server" and the start failed as "cannot listen on ... (is the port in use ...)".

def test_a_tls_certificate_that_is_not_pem(tmp_path, pki):  # noqa: F811
    (tmp_path / "server.pem").write_text("not a certificate\n")
    line = _refusal(tmp_path, tls=_tls(tmp_path))
    assert f"tls.cert_file {tmp_path / 'server.pem'}: no PEM certificate in it" in line, line
    assert "cannot listen" not in line


def test_a_tls_key_that_is_not_the_certificates(tmp_path, pki):  # noqa: F811
    line = _refusal(tmp_path, tls=_tls(tmp_path, key_file=str(tmp_path / "client_key.pem")))
    assert f"tls.key_file {tmp_path / 'client_key.pem'} is not the key of the certificate in tls.cert_file" in line, line


def test_a_tls_key_that_is_not_a_key(tmp_path, pki):  # noqa: F811
    (tmp_path / "server_key.pem").write_bytes(pki["server"])  # the certificate where the key should be
    line = _refusal(tmp_path, tls=_tls(tmp_path))
    assert f"tls.key_file {tmp_path / 'server_key.pem'}: no PEM private key in it" in line, line


def test_an_encrypted_tls_key(tmp_path, pki):  # noqa: F811
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki["server_key"], password=None)
    (tmp_path / "server_key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    line = _refusal(tmp_path, tls=_tls(tmp_path))
    assert f"tls.key_file {tmp_path / 'server_key.pem'}: the key is encrypted" in line, line


def test_a_client_ca_that_is_not_pem(tmp_path, pki):  # noqa: F811
    (tmp_path / "ca.pem").write_text("")
    line = _refusal(tmp_path, tls=_tls(tmp_path, client_ca_file=str(tmp_path / "ca.pem")))
    assert f"tls.client_ca_file {tmp_path / 'ca.pem'}: no PEM certificate in it" in line, line


def test_a_chain_and_a_file_holding_key_and_certificate_start(tmp_path, pki):  # noqa: F811
    """What an operator commonly gives still starts: the gateway's certificate followed by its CA's,
    and one file holding the key and the certificate given as both settings."""
    from gateway.config import load_config
    from gateway.tls_files import load_tls_files

    (tmp_path / "chain.pem").write_bytes(pki["server"] + pki["ca"])
    (tmp_path / "both.pem").write_bytes(pki["server_key"] + pki["server"])
    (tmp_path / "both.pem").chmod(0o600)
    for cert, key in (("chain.pem", "server_key.pem"), ("both.pem", "both.pem")):
        raw = yaml.safe_load(DEMO_CONFIG.read_text())
        raw["tls"] = _tls(tmp_path, cert_file=str(tmp_path / cert), key_file=str(tmp_path / key))
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
        files = load_tls_files(load_config(tmp_path / "c.yaml"))
        assert files.chain.count(b"BEGIN CERTIFICATE") >= 1 and b"PRIVATE KEY" in files.key
