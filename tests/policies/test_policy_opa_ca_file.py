"""``policy.opa_ca_file``: the CA bundle an ``https://`` OPA's certificate must chain to, given in
the configuration (relative to its file) instead of ``SSL_CERT_FILE``/``SSL_CERT_DIR``/certifi.

The OPA server is real and serves a certificate signed by a CA made for the test run: in no
trust store, and here never in the environment either.
"""

from __future__ import annotations

import asyncio

import shutil
from pathlib import Path

import certifi
import pytest
from pydantic import ValidationError

from gateway.config import Config, ConfigError
from gateway.testing import calls_recorded, start_gateway
from policies import OPAEngine, PolicyLoadError
from policy_opa_server import REGO, certificate_refused, tls_files
from tests.conftest import Client, audit_steps, demo_config

pytestmark = pytest.mark.opa



@pytest.fixture
def no_env_trust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def _ca_beside_config(tmp_path: Path, ca: Path) -> str:
    """The CA copied under the config's folder; its path relative to it, as a config would give it."""
    (tmp_path / "certs").mkdir(exist_ok=True)
    shutil.copyfile(ca, tmp_path / "certs" / "opa-ca.pem")
    return "certs/opa-ca.pem"


def _opa_policy(url: str, **extra: str) -> dict[str, object]:
    return {"engine": "opa", "opa_url": url, "timeout_ms": 2000, "bundle": str(REGO), **extra}


async def _one_call(cfg: Config) -> str:
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        return (await client.call("count_call", '{"n": 1}')).code
    finally:
        await client.close()
        await running.stop()


async def test_an_https_opa_trusted_only_through_opa_ca_file_decides_calls(tls_opa, tmp_path, no_env_trust):
    server, ca = tls_opa
    assert ca.read_bytes().strip() not in Path(certifi.where()).read_bytes()
    cfg = demo_config(tmp_path, policy=_opa_policy(server.url, opa_ca_file=_ca_beside_config(tmp_path, ca)))
    assert await _one_call(cfg) == "ok"
    assert calls_recorded(cfg.data_path / "sandbox", "count_call") == 1
    assert [r["code"] for r in audit_steps(cfg.audit_path) if r["stage"] == "policy"] == ["ok"]


async def test_without_opa_ca_file_the_same_opa_fails_closed(tls_opa, tmp_path, no_env_trust):
    server, _ = tls_opa
    cfg = demo_config(tmp_path, policy=_opa_policy(server.url))
    assert await _one_call(cfg) == "policy_unavailable"
    assert calls_recorded(cfg.data_path / "sandbox", "count_call") == 0
    (policy,) = [r for r in audit_steps(cfg.audit_path) if r["stage"] == "policy"]
    assert policy["code"] == "policy_unavailable" and "CERTIFICATE_VERIFY_FAILED" in policy["detail"]


def test_reload_trusts_opa_ca_file(tls_opa, no_env_trust):
    server, ca = tls_opa
    engine = OPAEngine(server.url, ca_file=ca)
    asyncio.run(engine.reload())
    assert engine.version.startswith("opa:sha256:")


async def test_opa_ca_file_replaces_the_trust_from_the_environment(tls_opa, tmp_path, monkeypatch):
    """Instead of, not beside: with SSL_CERT_FILE naming OPA's CA, a ca_file naming another CA
    is what OPA's certificate is checked against, and it fails."""
    server, ca = tls_opa
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    other_ca = tls_files(tmp_path)[0]
    engine = OPAEngine(server.url, timeout_ms=2000, ca_file=other_ca)
    await certificate_refused(engine)
    with pytest.raises(PolicyLoadError, match="CERTIFICATE_VERIFY_FAILED"):
        await engine.reload()


def _not_pem(tmp_path: Path) -> str:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    return "ca.pem"


def _folder(tmp_path: Path) -> str:
    (tmp_path / "certs").mkdir()
    return "certs"


@pytest.mark.parametrize("ca_file, url, code, message", [
    (lambda tmp: "missing.pem", "https://opa.test", "opa_ca_file_missing", "missing.pem: no such file"),
    (_folder, "https://opa.test", "opa_ca_file_unreadable", "certs: cannot be read"),
    (_not_pem, "https://opa.test", "opa_ca_file_invalid", "ca.pem: no PEM certificate in it"),
    (_not_pem, "http://127.0.0.1:8181", "opa_ca_file_needs_https", "policy.opa_url is not https://"),
], ids=["missing", "a_folder", "not_pem", "not_https"])
def test_an_opa_ca_file_that_cannot_serve_is_a_config_error(tmp_path, ca_file, url, code, message):
    policy = _opa_policy(url, opa_ca_file=ca_file(tmp_path))
    with pytest.raises(ConfigError) as info:
        demo_config(tmp_path, policy=policy)
    assert "policy.opa_ca_file" in str(info.value) and message in str(info.value)
    with pytest.raises(ValidationError) as raw:
        Config.model_validate({"policy": policy, "base_dir": str(tmp_path)})
    assert [e["type"] for e in raw.value.errors()] == [code]


def test_the_engine_refuses_a_ca_file_for_a_url_without_tls(tmp_path):
    with pytest.raises(ValueError, match="https:// OPA URL only"):
        OPAEngine("http://127.0.0.1:8181", ca_file=tmp_path / "ca.pem")
