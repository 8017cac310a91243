"""TLS and mTLS on the gRPC port, with certificates made by the test."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.testing import start_gateway
from tests.conftest import AGENT_KEY, demo_config


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _cert(subject: str, key, issuer_name: str, issuer_key, *, ca: bool = False, san: str | None = None) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, bytes]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("toolgate-test-ca", ca_key, "toolgate-test-ca", ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert("localhost", server_key, "toolgate-test-ca", ca_key, san="localhost")
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("agent", client_key, "toolgate-test-ca", ca_key)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM)  # noqa: E731
    files = {"ca": pem(ca), "server": pem(server), "server_key": _pem_key(server_key), "client": pem(client), "client_key": _pem_key(client_key)}
    for name, data in files.items():
        (tmp_path / f"{name}.pem").write_bytes(data)
        if name.endswith("_key"):  # as an operator keeps a private key: the gateway and the CLI refuse others'
            (tmp_path / f"{name}.pem").chmod(0o600)
    return files


async def _list(address: str, creds: grpc.ChannelCredentials) -> int:
    channel = grpc.aio.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", "localhost")])
    try:
        stub = pb_grpc.ToolGatewayStub(channel)
        resp = await stub.ListTools(pb.ListToolsRequest(), metadata=(("x-api-key", AGENT_KEY),), timeout=10)
        return len(resp.tools)
    finally:
        await channel.close()


async def test_mtls_accepts_a_client_certificate_and_refuses_a_client_without_one(tmp_path, pki):
    tls = {"cert_file": str(tmp_path / "server.pem"), "key_file": str(tmp_path / "server_key.pem"),
           "client_ca_file": str(tmp_path / "ca.pem")}
    running = await start_gateway(demo_config(tmp_path, tls=tls))
    try:
        with_cert = grpc.ssl_channel_credentials(pki["ca"], pki["client_key"], pki["client"])
        assert await _list(running.address, with_cert) > 0
        without = grpc.ssl_channel_credentials(pki["ca"])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _list(running.address, without)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop()


async def test_plaintext_client_cannot_talk_to_a_tls_gateway(tmp_path, pki):
    tls = {"cert_file": str(tmp_path / "server.pem"), "key_file": str(tmp_path / "server_key.pem")}
    running = await start_gateway(demo_config(tmp_path, tls=tls))
    try:
        assert await _list(running.address, grpc.ssl_channel_credentials(pki["ca"])) > 0
        channel = grpc.aio.insecure_channel(running.address)
        with pytest.raises(grpc.aio.AioRpcError):
            await pb_grpc.ToolGatewayStub(channel).ListTools(pb.ListToolsRequest(), metadata=(("x-api-key", AGENT_KEY),), timeout=5)
        await channel.close()
    finally:
        await running.stop()
