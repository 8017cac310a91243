"""The CLI talks TLS (and mTLS) to a gateway that serves it, and never sends an API key in
cleartext to a gateway that is not on this machine unless told to (``--insecure``). Real CLI
processes, a real ``toolgate serve`` with TLS on 127.0.0.1, certificates made by the test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from gateway.testing import GatewayProcess
from tests.conftest import AGENT_KEY, DEMO_CONFIG, ROOT
from tests.e2e.test_tls import pki  # noqa: F401  (the fixture: a CA, a server and a client certificate)


def _cli(*args, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**clean, **(env or {})})


@pytest.fixture
def tls_gateway(tmp_path, pki):  # noqa: F811
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["data_dir"] = str(tmp_path / "data")
    raw["policy"]["bundle"] = str(ROOT / "rego")
    raw["tls"] = {"cert_file": str(tmp_path / "server.pem"), "key_file": str(tmp_path / "server_key.pem"),
                  "client_ca_file": str(tmp_path / "ca.pem")}
    config = tmp_path / "toolgate.yaml"
    config.write_text(yaml.safe_dump(raw))
    proc = GatewayProcess(config, data_dir=tmp_path / "data").start()
    yield "localhost:" + proc.address.rsplit(":", 1)[1]  # the server certificate names localhost
    proc.stop()


def test_tools_over_mtls_with_the_ca_and_a_client_certificate(tls_gateway, tmp_path):
    out = _cli("tools", "--target", tls_gateway, "--api-key", AGENT_KEY, "--ca-file", tmp_path / "ca.pem",
               "--client-cert", tmp_path / "client.pem", "--client-key", tmp_path / "client_key.pem")
    assert out.returncode == 0 and "lookup_policy" in out.stdout, out


def test_the_same_from_the_environment(tls_gateway, tmp_path):
    env = {"TOOLGATE_CA_FILE": str(tmp_path / "ca.pem"), "TOOLGATE_CLIENT_CERT": str(tmp_path / "client.pem"),
           "TOOLGATE_CLIENT_KEY": str(tmp_path / "client_key.pem"), "TOOLGATE_API_KEY": AGENT_KEY}
    out = _cli("tools", "--target", tls_gateway, env=env)
    assert out.returncode == 0 and "lookup_policy" in out.stdout, out


def test_without_a_client_certificate_the_gateway_refuses(tls_gateway, tmp_path):
    out = _cli("tools", "--target", tls_gateway, "--api-key", AGENT_KEY, "--ca-file", tmp_path / "ca.pem",
               "--timeout", "5")
    assert out.returncode == 6 and out.stderr.startswith("toolgate: unavailable"), out
    assert "--client-cert and --client-key" in out.stderr, out.stderr  # gRPC says only "Socket closed"


def test_plaintext_to_a_tls_gateway_is_told_to_use_tls(tls_gateway, tmp_path):
    out = _cli("tools", "--target", tls_gateway, "--api-key", AGENT_KEY, "--timeout", "5")
    assert out.returncode == 6 and out.stderr.startswith("toolgate: unavailable"), out
    assert "if it serves TLS, give --ca-file" in out.stderr, out.stderr


@pytest.mark.parametrize("target", ["gateway.example:443", "10.255.255.1:50051", "[2001:db8::1]:50051"])
def test_a_key_is_never_sent_in_cleartext_off_this_machine(target):
    out = _cli("tools", "--target", target, "--api-key", AGENT_KEY, "--timeout", "1")
    assert out.returncode == 2 and out.stderr.startswith("toolgate: insecure_target:"), out
    assert "--ca-file" in out.stderr and "--insecure" in out.stderr


def test_insecure_sends_it_anyway_when_told_to():
    out = _cli("tools", "--target", "10.255.255.1:50051", "--api-key", AGENT_KEY, "--timeout", "0.5", "--insecure")
    assert out.returncode == 6, out  # it tried: no gateway there


def test_an_unreadable_tls_file_has_a_code(tmp_path):
    out = _cli("tools", "--target", "localhost:1", "--api-key", AGENT_KEY, "--ca-file", tmp_path / "nope.pem")
    assert out.returncode == 2 and out.stderr.startswith("toolgate: tls_file_unreadable:"), out
