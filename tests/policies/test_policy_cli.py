"""`toolgate policy test|check`: the default bundle passes; a broken test fails the run."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from gateway.cli import policy_cmd

REGO = Path(__file__).resolve().parents[2] / "rego"


def run(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="toolgate")
    policy_cmd.add_parser(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(list(argv))
    out = io.StringIO()
    return ns.func(ns, out=out, err=out), out.getvalue()


def test_default_bundle_tests_pass():
    code, out = run("policy", "test", str(REGO), "-v")
    assert code == 0, out
    assert out.splitlines()[-1].startswith("PASS: ")
    assert "data.toolgate_test.test_deny_wins_over_approval_for_destructive: PASS" in out
    total = out.splitlines()[-1].split("/")[-1]
    assert int(total) >= 30


def test_broken_policy_test_fails_with_nonzero_exit(tmp_path):
    (tmp_path / "p.rego").write_text('package toolgate\nimport rego.v1\ndecision := {"decision": "deny"}\n')
    (tmp_path / "p_test.rego").write_text(
        "package toolgate_test\nimport rego.v1\n"
        'test_denies if data.toolgate.decision.decision == "deny"\n'
        'test_allows if data.toolgate.decision.decision == "allow"\n'
        "test_errors if 1 / count([]) > 0\n"
    )
    code, out = run("policy", "test", str(tmp_path))
    assert code == 1
    assert "data.toolgate_test.test_allows: FAIL" in out
    assert "data.toolgate_test.test_errors: ERROR" in out
    assert "test_denies" not in out  # passing tests only with -v
    assert out.splitlines()[-3:] == ["PASS: 1/3", "FAIL: 1/3", "ERROR: 1/3"]


def test_folder_without_tests_fails(tmp_path):
    (tmp_path / "p.rego").write_text('package toolgate\ndecision := {"decision": "deny"}\n')
    code, out = run("policy", "test", str(tmp_path))
    assert code == 1
    assert "no test_* rules" in out


def test_unloadable_folder_is_an_error(tmp_path):
    (tmp_path / "p.rego").write_text("package toolgate\nx := \n")
    code, out = run("policy", "test", str(tmp_path))
    assert code == 2
    assert "p.rego:3" in out


def test_check_accepts_the_default_bundle():
    code, out = run("policy", "check", str(REGO))
    assert code == 0
    assert "sha256:" in out


def test_check_reports_a_missing_builtin(tmp_path):
    (tmp_path / "p.rego").write_text('package toolgate\nx := crypto.hmac.sha256("k", "v")\n')
    code, out = run("policy", "check", str(tmp_path))
    assert code == 2
    assert "crypto.hmac.sha256" in out and "policy.engine: opa" in out


def test_check_reports_a_rule_that_depends_on_itself(tmp_path):
    (tmp_path / "p.rego").write_text("package toolgate\nimport rego.v1\na if b\nb if a\n")
    code, out = run("policy", "check", str(tmp_path))
    assert code == 2
    assert out.startswith("toolgate: policy_bundle_invalid: ") and "rego_recursion_error" in out
    assert "p.rego:3: " in out and "data.toolgate.a -> data.toolgate.b -> data.toolgate.a" in out


def test_help_explains_the_test_verb(capsys):
    with pytest.raises(SystemExit) as info:
        run("policy", "test", "--help")
    assert info.value.code == 0
    assert "test_*" in capsys.readouterr().out


def test_toolgate_policy_test_runs_from_the_main_cli():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "test", "rego"],
        cwd=REGO.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("PASS: ")
