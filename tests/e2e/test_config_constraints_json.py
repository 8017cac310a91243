"""A tool's constraints must be JSON values: what YAML reads as something else is refused at load,
saying where and what to write, not sent to the policy as one thing and the executor as another."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from gateway.config import ConfigError, load_config
from gateway.tools import ToolRegistry
from tests.conftest import DEMO_CONFIG, ROOT


def _write(tmp_path, constraints_yaml: str):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    tool = dict(raw["tools"][0])
    tool.pop("constraints", None)
    raw["tools"] = [tool]
    text = yaml.safe_dump(raw).replace(f"name: {tool['name']}\n", f"name: {tool['name']}\n  constraints: {constraints_yaml}\n", 1)
    path = tmp_path / "toolgate.yaml"
    path.write_text(text)
    return path, tool["name"]


@pytest.mark.parametrize(("constraints", "said"), [
    ("{expires: 2026-01-01}", "constraints.expires is a YAML date value"),
    ("{at: 2026-01-01T10:00:00Z}", "constraints.at is a YAML datetime value"),
    ("{ports: {80: http}}", "constraints.ports has the key 80 (int): JSON keys are text, so quote it"),
    ("{flags: {yes: 1}}", "constraints.flags has the key True (bool)"),  # YAML 1.1 reads yes as true
    ("{x: .nan}", "constraints.x is nan, which JSON has no number for"),
    ("{x: [1, .inf]}", "constraints.x[1] is inf"),
    ("{s: !!set {a, b}}", "constraints.s is a YAML set value"),
    ("{b: !!binary aGk=}", "constraints.b is a YAML bytes value"),
    ('{t: "a\\ud800"}', "constraints.t holds a lone surrogate"),
    ("{deep: " + "[" * 70 + "]" * 70 + "}", "is nested deeper than 64"),
])
def test_a_constraint_json_has_no_form_for_is_refused_at_load(tmp_path, constraints, said):
    path, name = _write(tmp_path, constraints)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert said in str(err.value) and f"tool '{name}'" in str(err.value), str(err.value)


def test_json_constraints_load_and_reach_the_policy_as_written(tmp_path):
    path, name = _write(tmp_path, '{hosts: [api.example.com], limits: {rows: 5, ratio: 0.5, strict: true, note: "café", none: null}}')
    config = load_config(path)
    (tool,) = [t for t in ToolRegistry(config.tools) if t.name == name]
    assert tool.policy_view()["constraints"] == {"hosts": ["api.example.com"],
                                                 "limits": {"rows": 5, "ratio": 0.5, "strict": True, "note": "café", "none": None}}
    assert json.loads(json.dumps(tool.policy_view())) == tool.policy_view()  # what the engine is sent is what is configured


def test_serve_with_such_a_constraint_says_config_invalid_and_where(tmp_path):
    """A real ``toolgate serve`` (a process, so a regression that lets it start fails on the timeout
    instead of hanging the suite)."""
    path, name = _write(tmp_path, "{expires: 2026-01-01}")
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.splitlines()[-1].startswith("toolgate: config_invalid: "), done.stderr
    assert f"tool '{name}': constraints.expires is a YAML date value" in done.stderr
