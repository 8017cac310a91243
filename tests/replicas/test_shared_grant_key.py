"""Replicas sharing PostgreSQL sign grants with one key the operator gives them all: a gateway on
PostgreSQL never makes a grant key of its own (its grants would be refused by every other
replica); ``toolgate keys grant`` makes the shared one. A gateway on SQLite still makes its own."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.approvals.config import ApprovalsConfig
from gateway.approvals.keyring import load_grant_keys
from gateway.testing import GatewayProcess
from tests._postgres import pg_dsn  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *argv], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def _config(tmp_path: Path, grant_key: Path, **store: str) -> Path:
    raw = yaml.safe_load((ROOT / "examples" / "toolgate.yaml").read_text())
    raw["data_dir"] = str(tmp_path / "data")
    raw["listen"] = "127.0.0.1:0"
    raw["policy"]["bundle"] = str(ROOT / "rego")
    raw["approvals"]["grant_keys"] = [str(grant_key)]
    if store:
        raw["store"] = store
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.postgres
def test_a_gateway_on_postgres_does_not_make_its_own_grant_key(tmp_path, pg_dsn):  # noqa: F811
    missing = tmp_path / "keys" / "grant.pem"
    out = _cli("serve", "--config", str(_config(tmp_path, missing, kind="postgres", dsn=pg_dsn)))
    assert out.returncode != 0
    assert "cannot_start" in out.stderr and f"grant key {missing} does not exist" in out.stderr, out.stderr
    assert "toolgate keys grant" in out.stderr
    assert not missing.exists()


@pytest.mark.postgres
def test_the_key_toolgate_keys_grant_makes_serves_a_gateway_on_postgres(tmp_path, pg_dsn):  # noqa: F811
    key = tmp_path / "keys" / "grant.pem"
    made = _cli("keys", "grant", "--out", str(key))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "approvals.grant_keys" in made.stderr and f"grant_keys: [{key.resolve()}]" in made.stderr
    gw = GatewayProcess(_config(tmp_path, key, kind="postgres", dsn=pg_dsn), data_dir=tmp_path / "data").start()
    gw.stop()


def test_keys_grant_never_overwrites_a_key(tmp_path):
    key = tmp_path / "grant.pem"
    assert _cli("keys", "grant", "--out", str(key)).returncode == 0
    before = key.read_bytes()
    again = _cli("keys", "grant", "--out", str(key))
    assert again.returncode != 0 and "key_file_exists" in again.stderr
    assert key.read_bytes() == before
    beside_a_file = _cli("keys", "grant", "--out", str(key / "inner.pem"))
    assert beside_a_file.returncode != 0 and "key_dir_unwritable" in beside_a_file.stderr


def test_a_gateway_on_sqlite_still_makes_its_own(tmp_path):
    cfg = ApprovalsConfig.model_validate({"grant_keys": ["grant-signing.pem"]})
    keys = load_grant_keys(cfg, tmp_path, "gw")
    assert (tmp_path / "grant-signing.pem").exists() and keys.signer.kid.startswith("grant-")
    assert os.stat(tmp_path / "grant-signing.pem").st_mode & 0o077 == 0
    with pytest.raises(ValueError, match="does not exist. With store.kind: postgres"):
        load_grant_keys(ApprovalsConfig.model_validate({"grant_keys": ["other.pem"]}), tmp_path, "gw", shared_store=True)
    assert not (tmp_path / "other.pem").exists()


def test_keys_grant_names_the_file_as_the_config_must_list_it(tmp_path):
    """A relative grant_keys entry is taken from the data dir, not from where the CLI ran: the
    line to paste names the file absolutely."""
    made = _cli("keys", "grant", "--out", "grant.pem", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"grant_keys: [{tmp_path.resolve() / 'grant.pem'}]" in made.stderr
