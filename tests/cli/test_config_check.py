"""``toolgate config check FILE``: every problem a start would stop on, found without starting and
without writing anything; the real CLI in subprocesses. Each refused config is also given to a
real ``toolgate serve``, which must refuse it too (the check reads with the start's own code)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.cli._errors import EXIT
from tests.conftest import DEMO_CONFIG, ROOT


def _config(tmp_path: Path, **changes: Any) -> Path:
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["data_dir"] = str(tmp_path / "data")
    raw["policy"]["bundle"] = str(ROOT / "rego")
    for key, value in changes.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _check(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "config", "check", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**_env(), **env})


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_SECRET_")}


def _serve_refuses(config: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "listening" not in done.stdout and done.returncode == EXIT["cannot_start"], done
    return done.stderr.strip().splitlines()[-1]


def _errors(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    lines = [line for line in done.stderr.splitlines() if line.startswith("toolgate: ")]
    return {line.split(": ", 2)[1]: line.split(": ", 2)[2] for line in lines}


def _certificate(tmp_path: Path, days: float) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=400))
            .not_valid_after(now + datetime.timedelta(days=days)).sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "server.pem", tmp_path / "server_key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


def test_the_demo_config_passes_and_nothing_is_written(tmp_path):
    config = _config(tmp_path, audit={"signing_key": "audit-signing.pem"})
    done = _check(config)
    assert done.returncode == 0, done
    assert done.stdout.strip().endswith(f"config ok: {config}")
    assert "tools: 8 (" in done.stdout and "policy: embedded" in done.stdout
    assert "the first grant key is made at the first start" in done.stdout
    assert "signing key" in done.stdout and "made at the first start" in done.stdout
    assert done.stderr == "" and "warning" not in done.stdout
    assert not (tmp_path / "data").exists()  # no data dir, no grant key, no audit key: nothing written


def test_every_problem_is_reported_and_a_start_stops_on_each(tmp_path):
    bundle = tmp_path / "rego"
    bundle.mkdir()
    (bundle / "broken.rego").write_text("package toolgate\n\ndecision := {\n")
    cert, key = _certificate(tmp_path, days=90)
    cert.write_text("not a certificate\n")
    grant = tmp_path / "data" / "grant-signing.pem"
    grant.parent.mkdir()
    grant.write_text("not a key\n")
    grant.chmod(0o600)
    config = _config(tmp_path, tls={"cert_file": str(cert), "key_file": str(key)})
    raw = yaml.safe_load(config.read_text())
    raw["policy"]["bundle"] = str(bundle)
    config.write_text(yaml.safe_dump(raw))

    done = _check(config)
    assert done.returncode == EXIT["policy_bundle_invalid"] == 2, done
    errors = _errors(done)
    assert set(errors) == {"policy_bundle_invalid", "grant_key_invalid", "tls_file_invalid"}, done.stderr
    assert "broken.rego" in errors["policy_bundle_invalid"]
    assert f"approvals.grant_keys: {grant} is not an unencrypted Ed25519 private key" in errors["grant_key_invalid"]
    assert f"tls.cert_file {cert}: no PEM certificate in it" in errors["tls_file_invalid"]
    assert "config ok" not in done.stdout

    # the start stops on each of them, one at a time
    assert "broken.rego" in _serve_refuses(config)
    raw["policy"]["bundle"] = str(ROOT / "rego")
    config.write_text(yaml.safe_dump(raw))
    assert "approvals.grant_keys" in _serve_refuses(config)
    grant.unlink()
    assert "tls.cert_file" in _serve_refuses(config)
    assert set(_errors(_check(config))) == {"tls_file_invalid"}


def test_a_tenant_without_a_secret_is_a_warning_never_showing_a_value(tmp_path):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    values = raw["secrets"]["providers"][1]["values"]
    del values["globex"]
    config = _config(tmp_path, secrets=raw["secrets"])
    done = _check(config)
    assert done.returncode == 0, done
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning: ")]
    assert warnings == ["warning: credential_unavailable: tool http_get: tenant globex has no secret github_token "
                        "(as this process sees the providers): its calls are refused unless the policy names a "
                        "credential_variant that exists"], done.stdout
    assert "demo-acme-github-token" not in done.stdout + done.stderr
    # the env provider, as this process sees it, supplies it
    fixed = _check(config, TOOLGATE_SECRET_GLOBEX__GITHUB_TOKEN="from-env-not-real")
    assert fixed.returncode == 0 and "warning" not in fixed.stdout, fixed
    assert "from-env-not-real" not in fixed.stdout + fixed.stderr


def test_a_certificate_near_its_end_is_a_warning(tmp_path):
    cert, key = _certificate(tmp_path, days=5)
    done = _check(_config(tmp_path, tls={"cert_file": str(cert), "key_file": str(key)}))
    assert done.returncode == 0, done
    assert "warning: tls_certificate_expiring: tls.cert_file: the certificate expires on " in done.stdout
    cert, key = _certificate(tmp_path, days=-1)
    done = _check(_config(tmp_path, tls={"cert_file": str(cert), "key_file": str(key)}))
    assert "warning: tls_certificate_expired: " in done.stdout and "clients refuse it" in done.stdout, done


def test_a_config_that_does_not_load_is_config_invalid(tmp_path):
    bad = tmp_path / "toolgate.yaml"
    bad.write_text("workers: many\n")
    done = _check(bad)
    assert done.returncode == EXIT["config_invalid"] and done.stderr.startswith("toolgate: config_invalid: "), done
    done = _check(tmp_path / "missing.yaml")
    assert done.returncode == 2 and "no such file" in done.stderr, done


def test_an_approver_key_that_does_not_load_names_the_setting(tmp_path):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["approvals"]["approvers"][0]["keys"][0]["public_key"] = "AAAA"
    config = _config(tmp_path, approvals=raw["approvals"])
    done = _check(config)
    assert done.returncode == EXIT["config_invalid"] and set(_errors(done)) == {"config_invalid"}, done
    assert "approvals.approvers.0.keys.0.public_key: " in done.stderr and "32" in done.stderr, done.stderr
    serve = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert serve.returncode == EXIT["config_invalid"] and "listening" not in serve.stdout, serve
    assert serve.stderr.startswith("toolgate: config_invalid: ") and "approvals.approvers.0.keys.0.public_key" in serve.stderr
