"""The clients talk TLS (mTLS) when given credentials, or the CA and client files in the
environment, and refuse to send the API key in plaintext to a gateway off this machine unless
told to (``insecure=True``). A real TLS gateway on 127.0.0.1, certificates made by the test."""

from __future__ import annotations

import grpc
import pytest

from runtime_client import AsyncGatewayClient, GatewayClient
from tests.conftest import AGENT_KEY, demo_config
from tests.e2e.test_tls import pki  # noqa: F401  (a CA, a server and a client certificate)

gateway_testing = pytest.importorskip("gateway.testing")


@pytest.fixture
async def tls_address(tmp_path, pki):  # noqa: F811
    tls = {"cert_file": str(tmp_path / "server.pem"), "key_file": str(tmp_path / "server_key.pem"),
           "client_ca_file": str(tmp_path / "ca.pem")}
    running = await gateway_testing.start_gateway(demo_config(tmp_path, tls=tls))
    try:
        yield "localhost:" + str(running.port)  # the server certificate names localhost
    finally:
        await running.stop()


async def test_credentials_given_are_used(tls_address, pki):  # noqa: F811
    creds = grpc.ssl_channel_credentials(pki["ca"], pki["client_key"], pki["client"])
    async with AsyncGatewayClient(tls_address, api_key=AGENT_KEY, credentials=creds) as client:
        assert any(t.name == "lookup_policy" for t in await client.list_tools())


async def test_credentials_from_the_environment(tls_address, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGATE_CA_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("TOOLGATE_CLIENT_CERT", str(tmp_path / "client.pem"))
    monkeypatch.setenv("TOOLGATE_CLIENT_KEY", str(tmp_path / "client_key.pem"))
    async with AsyncGatewayClient(tls_address, api_key=AGENT_KEY) as client:
        assert any(t.name == "lookup_policy" for t in await client.list_tools())


@pytest.mark.parametrize("make", [AsyncGatewayClient, GatewayClient])
@pytest.mark.parametrize("target", ["gateway.example:443", "10.0.0.7:50051"])
async def test_plaintext_off_this_machine_is_refused_unless_asked_for(make, target, monkeypatch):
    for name in ("TOOLGATE_CA_FILE", "TOOLGATE_CLIENT_CERT", "TOOLGATE_CLIENT_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="not on this machine.*insecure=True"):
        make(target, api_key=AGENT_KEY)
    await _close(make(target, api_key=AGENT_KEY, insecure=True))  # channels connect lazily: nothing is sent


@pytest.mark.parametrize("target", ["127.0.0.1:50051", "localhost:50051", "[::1]:50051", "unix:/tmp/toolgate.sock"])
async def test_plaintext_on_this_machine_is_the_sidecar_default(target):
    await _close(AsyncGatewayClient(target, api_key=AGENT_KEY))


async def _close(client) -> None:
    closed = client.close()
    if closed is not None:
        await closed


@pytest.mark.skipif(__import__("os").name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620])
def test_a_client_key_from_the_environment_others_may_read_or_write_is_refused(tmp_path, pki, monkeypatch, mode):  # noqa: F811
    key = tmp_path / "client_key.pem"
    key.chmod(mode)
    monkeypatch.setenv("TOOLGATE_CA_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("TOOLGATE_CLIENT_CERT", str(tmp_path / "client.pem"))
    monkeypatch.setenv("TOOLGATE_CLIENT_KEY", str(key))
    with pytest.raises(ValueError, match=rf"TOOLGATE_CLIENT_KEY {key}: mode {mode:o} lets .*chmod 600"):
        GatewayClient("localhost:9", api_key=AGENT_KEY)
