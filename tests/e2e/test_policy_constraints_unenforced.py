"""A constraint key that nothing would enforce is refused, never ignored: a decision narrowing a
subprocess or http tool with a key its executor does not read (``read_only: true``, say) ran the
tool unnarrowed. ``hosts`` and ``credential_variant`` the gateway enforces for every tool; a python
tool is handed every key to honour; ``null`` sets nothing; a key the descriptor pins is the
descriptor's (``constraint_problem`` when changed)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import audit_records, call_once, demo_config, policy_bundle

HEADER = "package toolgate\nimport rego.v1\nvisible := true\n"


def _config(tmp_path, decision):
    bundle = policy_bundle(tmp_path / "bundle", HEADER + f"decision := {json.dumps(decision)}\n")
    return demo_config(tmp_path, policy={"bundle": str(bundle)})


def _allow(constraints):
    return {"decision": "allow", "reasons": ["ok"], "constraints": constraints}


def _result(cfg, response):
    return [r for r in audit_records(cfg.audit_path) if r["decision_id"] == response.decision_id][-1]


@pytest.mark.parametrize(("tool", "args"), [
    ("run_command", {"command": "uname"}),
    ("http_get", {"owner": "octocat", "repo": "hello-world"}),  # refused before any connection
])
async def test_a_key_the_executor_does_not_enforce_is_refused_before_the_call_runs(tmp_path, tool, args):
    cfg = _config(tmp_path, _allow({"read_only": True}))
    response = await call_once(cfg, tool, json.dumps(args))
    assert response.code == "policy_invalid_decision", response
    assert "constraints.read_only" in response.refused.reasons[0], response.refused.reasons
    assert "never ignored" in response.refused.reasons[0]
    result = _result(cfg, response)
    assert (result["stage"], result["executed"]) == ("result", False)


async def test_a_python_tool_is_handed_the_key_and_runs(tmp_path):
    cfg = _config(tmp_path, _allow({"read_only": True}))
    response = await call_once(cfg, "echo", json.dumps({"x": 1}))
    assert response.code == "ok", response


async def test_a_null_key_sets_nothing_and_the_subprocess_runs(tmp_path):
    cfg = _config(tmp_path, _allow({"read_only": None}))
    response = await call_once(cfg, "run_command", json.dumps({"command": "uname"}))
    assert response.code == "ok", response


async def test_nobody_is_asked_to_approve_a_call_that_could_not_be_narrowed(tmp_path):
    decision = {"decision": "require_approval", "reasons": ["check"], "constraints": {"max_rows": 5},
                "approval": {"groups_any": ["support-leads"], "quorum": 1, "ttl_seconds": 600}}
    cfg = _config(tmp_path, decision)
    response = await call_once(cfg, "run_command", json.dumps({"command": "uname"}))
    assert response.code == "policy_invalid_decision", response
    assert not response.HasField("approval_required")
    assert "approval_id" not in _result(cfg, response)
