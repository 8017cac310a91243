"""Real OPA servers for the policy tests (helpers; the fixtures are in conftest.py): on TCP,
optionally with TLS (``tls_files`` makes a CA and a certificate it signed), and on a Unix socket.

The binary comes from ``$TOOLGATE_OPA`` (the Makefile sets it), else the Makefile's cache
(``~/.cache/toolgate/opa-v1.22.0/opa``). Without it the OPA tests are skipped with the
reason — or fail when ``CI=true``, so CI cannot go green without running them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from policies.testing import OPA_VERSION

REGO = Path(__file__).resolve().parents[2] / "rego"

WRITE = {
    "tool": {"name": "write_file", "version": "1", "risk": {"side_effect": "write"}, "labels": [], "constraints": {}},
    "args": {"path": "notes/a.md"},
    "run": {"id": "r", "step": 1, "evidence": {}},
}
"""A policy input the default bundle sends to approval (never ``allow``)."""


async def certificate_refused(engine: Any) -> None:
    """Assert that ``engine`` (an https ``OPAEngine``) does not trust OPA's certificate: a
    decision fails ``policy_unavailable`` naming the verification failure. Closes the engine."""
    from policies import PolicyError

    try:
        with pytest.raises(PolicyError) as info:
            await engine.evaluate(WRITE)
    finally:
        await engine.close()
    assert info.value.code == "policy_unavailable" and "CERTIFICATE_VERIFY_FAILED" in str(info.value)


def opa_path() -> Path:
    """The OPA binary, or skip (fail under CI=true) naming where it was looked for."""
    env = os.environ.get("TOOLGATE_OPA")
    path = Path(env) if env else Path.home() / ".cache" / "toolgate" / f"opa-{OPA_VERSION}" / "opa"
    if path.is_file():
        return path
    reason = f"OPA binary not found at {path} (set TOOLGATE_OPA or run `make opa`)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A fresh CA (so in no trust store), and a certificate for 127.0.0.1 it signed:
    (CA file, certificate file, key file)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1))
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toolgate test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(valid[0]).not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "opa")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(valid[0]).not_valid_after(valid[1])
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = folder / "ca.pem", folder / "opa.pem", folder / "opa.key"
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return files


class OPAServer:
    """``opa run --server`` on 127.0.0.1 with decision logging on; start/stop/restart.

    ``tls``: (CA, certificate, private key) files; OPA then serves ``https://`` with the
    certificate, which the CA signed.
    """

    def __init__(self, binary: Path, bundle: Path, log_dir: Path, port: int | None = None,
                 tls: tuple[Path, Path, Path] | None = None) -> None:
        self.binary, self.bundle, self.log_dir, self.tls = binary, bundle, log_dir, tls
        self.port = port or free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        """Start OPA and return once ``/health`` answers 200; fail after ``timeout`` seconds."""
        log = open(self.log_dir / f"opa-{self.port}.log", "ab")
        argv = [str(self.binary), "run", "--server", "--addr", f"127.0.0.1:{self.port}"]
        argv += ["--set", "decision_logs.console=true", str(self.bundle)]
        if self.tls:
            argv += ["--tls-cert-file", str(self.tls[1]), "--tls-private-key-file", str(self.tls[2])]
        self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        verify = ssl.create_default_context(cafile=self.tls[0]) if self.tls else True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"opa exited with {self._proc.returncode}; see {log.name}")
            try:  # trust_env=False: a proxy in the developer's environment must not answer for OPA
                if httpx.get(f"{self.url}/health", timeout=0.5, verify=verify, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"opa did not become healthy within {timeout} s")

    def stop(self) -> None:
        """Stop OPA (SIGTERM, then SIGKILL) and wait for it to exit."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


class UnixSocketOPA:
    """``opa run --server --addr unix://<dir>/opa.sock`` serving the default bundle and ``extra``."""

    def __init__(self, binary: Path, extra: Path, log_dir: Path) -> None:
        self.binary, self.extra, self.log_dir = binary, extra, log_dir
        self.dir = Path(tempfile.mkdtemp(prefix="opa-"))  # short: a socket path has ~100 bytes at most
        self.socket = self.dir / "opa.sock"
        self.url = f"unix://{self.socket}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [str(self.binary), "run", "--server", "--addr", self.url, str(REGO), str(self.extra)]
        with open(self.log_dir / "opa-unix.log", "ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self._proc.poll() is None, "opa exited; see opa-unix.log"
            if self._healthy():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("opa on the Unix socket did not become healthy")

    def _healthy(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(0.5)
                sock.connect(str(self.socket))
                sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                return sock.recv(64).split(b" ")[1:2] == [b"200"]
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
