"""Builtins whose answers differ between the embedded engine and OPA are named where a bundle
calls them (``policies._divergence``): by ``toolgate policy check``, ``toolgate config check``
and the gateway's start log. Each named difference is measured here against the pinned OPA, so
a regorus that stops differing makes its warning fail here instead of staying on as noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import regorus
import yaml

from bundle_files import write_bundle
from policies._divergence import _CALLS, _PATTERN_PARAM
from policies.embedded import EmbeddedEngine

ROOT = Path(__file__).resolve().parents[2]

DIFFERING = {  # one expression per named builtin whose answer differs (or errors on one side only)
    "upper": 'upper("sta\ufb00")',
    "lower": 'lower("ADM\u0130N")',
    "net.cidr_contains": 'net.cidr_contains("10.0.0.0/8", "::ffff:10.1.2.3")',
    "net.cidr_intersects": 'net.cidr_intersects("10.0.0.0/8", "::ffff:10.0.0.0/104")',
    "net.cidr_contains_matches": 'net.cidr_contains_matches(["10.0.0.0/8"], ["::ffff:10.1.2.3"])',
    "to_number": 'to_number(" 1000")',
    "strings.count": 'strings.count("abc", "")',
    "time.parse_duration_ns": '[1 | not time.parse_duration_ns("9\u00e9")]',  # OPA: undefined, so "not" holds
    "regex.match": r'regex.match(`^\w+$`, "na\u00efve")',
    "regex.find_n": r'regex.find_n(`\w+`, "na\u00efve x", -1)',
    "regex.find_all_string_submatch_n": r'regex.find_all_string_submatch_n(`\d`, "\u0661", -1)',
    "regex.split": r'regex.split(`\s`, "a\u3000b")',
    "regex.replace": r'regex.replace("na\u00efve", `\w`, "_")',
    "regex.template_match": r'regex.template_match("{\\w+}", "na\u00efve", "{", "}")',
}


def _regorus(expr: str) -> object:
    engine = regorus.Engine()
    engine.add_policy("p.rego", f"package p\nx := {expr}\n")
    try:
        return json.loads(engine.eval_rule_as_json("data.p.x"))
    except BaseException:  # noqa: BLE001 - an error or a panic: no answer
        return "<no answer>"


def _opa(opa_binary: Path, expr: str) -> object:
    done = subprocess.run([str(opa_binary), "eval", "--format=json", expr], capture_output=True, text=True, timeout=60)
    try:
        return json.loads(done.stdout)["result"][0]["expressions"][0]["value"]
    except (ValueError, KeyError, IndexError):
        return "<no answer>"


def test_every_named_builtin_has_a_measured_difference():
    assert set(DIFFERING) == set(_CALLS) | set(_PATTERN_PARAM)


@pytest.mark.parametrize("name", sorted(DIFFERING))
def test_the_engines_answer_differently(opa_binary, name):
    expr = DIFFERING[name]
    assert _regorus(expr) != _opa(opa_binary, expr), expr


def _check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "policy", "check", str(folder)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


POLICY = r"""package toolgate
import rego.v1
visible := true
decision := {"decision": "allow", "reasons": []} if {
    regex.match(`^\w+$`, input.args.name)
    regex.match("^[a-z]+$", input.args.name)
    net.cidr_contains("10.0.0.0/8", input.args.ip)
    regex.split(input.args.sep, input.args.name)
    shout(input.args.name) == "X"
}
shout(s) := upper(s)
"""


def test_policy_check_names_each_call_site_and_loads(tmp_path):
    done = _check(write_bundle(tmp_path / "b", {"p.rego": POLICY}))
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done
    warnings = [line.split(": ", 3)[2:] for line in done.stdout.splitlines() if line.startswith("warning: ")]
    named = [(where.rsplit(":", 1)[1], rest.split(":", 1)[0]) for where, rest in warnings]
    assert named == [("5", "regex.match"), ("7", "net.cidr_contains"), ("8", "regex.split"), ("11", "upper")], done.stdout
    assert "the pattern is not a literal" in done.stdout  # line 8; line 6's ASCII-only pattern is not named


def test_a_function_of_the_package_named_like_a_builtin_is_not_named(tmp_path):
    rego = POLICY.replace("shout", "upper").replace("upper(s) := upper(s)", "upper(s) := concat(\"\", [s, \"!\"])")
    done = _check(write_bundle(tmp_path / "b", {"p.rego": rego}))
    assert done.returncode == 0 and "upper" not in done.stdout, done


def test_the_default_bundle_has_none():
    assert EmbeddedEngine.from_bundle(ROOT / "rego").divergences() == []
    done = _check(ROOT / "rego")
    assert done.returncode == 0 and "warning" not in done.stdout, done


def test_config_check_names_them(tmp_path):
    bundle = write_bundle(tmp_path / "b", {"p.rego": POLICY})
    raw = yaml.safe_load((ROOT / "examples" / "toolgate.yaml").read_text())
    raw["data_dir"], raw["policy"]["bundle"] = str(tmp_path / "data"), str(bundle)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "config", "check", str(tmp_path / "t.yaml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done
    assert done.stdout.count("warning: engine_divergence: ") == 4, done.stdout


async def test_the_gateway_logs_them_at_start(tmp_path):
    from structlog.testing import capture_logs

    from gateway.app import GatewayApp
    from gateway.config import load_config

    bundle = write_bundle(tmp_path / "b", {"p.rego": POLICY})
    raw = yaml.safe_load((ROOT / "examples" / "toolgate.yaml").read_text())
    raw["data_dir"], raw["policy"]["bundle"] = str(tmp_path / "data"), str(bundle)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    with capture_logs() as logs:
        app = GatewayApp(load_config(tmp_path / "t.yaml"))
    await app.close(grace=0)
    calls = [entry["call"] for entry in logs if entry["event"] == "policy_engine_divergence"]
    assert len(calls) == 4 and "regex.match" in calls[0], logs
