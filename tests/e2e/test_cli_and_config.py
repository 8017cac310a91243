"""The CLI against a real `toolgate serve` process, config errors, and the stub check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from gateway.testing import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})}, cwd=ROOT,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc = GatewayProcess(ROOT / "examples" / "toolgate.yaml", data_dir=tmp_path_factory.mktemp("data")).start()
    yield proc
    proc.stop()


def test_call_prints_one_json_object_and_exits_zero_on_ok(served):
    out = _cli("call", "lookup_policy", "--args", '{"topic": "refunds"}', "--target", served.address, "--api-key", "demo-agent-key")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["outcome"] == "observation" and doc["code"] == "ok"
    assert doc["decision_id"] and doc["args_hash"].startswith("sha256:")
    assert doc["observation"]["data"]["topic"] == "refunds"


def test_call_takes_target_and_key_from_the_environment(served):
    env = {"TOOLGATE_TARGET": served.address, "TOOLGATE_API_KEY": "demo-agent-key"}
    out = _cli("call", "delete_file", "--args", '{"path": "x"}', env=env)
    doc = json.loads(out.stdout)
    assert out.returncode == 3 and doc["outcome"] == "refused" and doc["code"] == "policy_denied"
    assert doc["reasons"]


def test_tools_json_lists_schema_and_risk(served):
    out = _cli("tools", "--json", "--target", served.address, "--api-key", "demo-agent-key")
    tools = {t["name"]: t for t in json.loads(out.stdout)}
    assert tools["write_file"]["risk"]["side_effect"] == "write"
    assert tools["write_file"]["input_schema"]["required"] == ["path", "content"]


def test_wrong_api_key_exits_with_a_hint(served):
    out = _cli("tools", "--target", served.address, "--api-key", "nope")
    assert out.returncode == 6 and "unauthenticated" in out.stderr and "api-key" in out.stderr


def test_help_explains_each_verb():
    out = _cli("--help")
    for verb in ("serve", "tools", "call", "audit", "policy"):
        assert verb in out.stdout
    assert "--approval-id" in _cli("call", "--help").stdout


def test_config_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - name: t\n    risk: {side_effect: explode}\n    executor: {kind: python}\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert "bad.yaml: tools.0.risk.side_effect" in str(err.value)
    out = _cli("serve", "--config", str(bad))
    assert out.returncode == 2 and "tools.0.risk.side_effect" in out.stderr


def test_generated_stubs_match_the_proto():
    out = subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("field,value", [("tenant", "acme\u0000corp"), ("tenant", ""), ("agent", "bot\n"),
                                         ("user", "\u001b[31mroot"), ("name", "x" * 129), ("user", "bob\u0085")])
def test_identity_names_with_control_characters_are_refused_at_load(tmp_path, field, value):
    identity = {"name": "a", "api_key_sha256": "0" * 64, "tenant": "acme", "agent": "bot", field: value}
    bad = tmp_path / "bad.json"  # YAML cannot carry every control character; JSON is YAML too
    bad.write_text(json.dumps({"identities": [identity]}))
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert f"identities.0.{field}" in str(err.value)


def test_identity_names_may_be_any_printable_text(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"identities": [{"name": "Ops bot (EU)", "api_key_sha256": "0" * 64,
                                                "tenant": "acme.corp", "agent": "bot-1", "user": "zoë@acme"}]}))
    assert load_config(good).identities[0].user == "zoë@acme"
