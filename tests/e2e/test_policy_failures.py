"""Policy errors, malformed and undefined decisions all deny, and are audited (issue A)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import calls_recorded, start_gateway
from tests.conftest import Client, audit_records, audit_steps, call_once, demo_config, policy_bundle

HEADER = "package toolgate\nimport rego.v1\nvisible := true\n"

CASES = {
    "unknown_decision_value": ('decision := {"decision": "allow_all", "reasons": []}', "policy_invalid_decision"),
    "decision_not_an_object": ('decision := "allow"', "policy_invalid_decision"),
    "extra_field": ('decision := {"decision": "allow", "reasons": [], "sudo": true}', "policy_invalid_decision"),
    "reasons_wrong_type": ('decision := {"decision": "allow", "reasons": "fine"}', "policy_invalid_decision"),
    "approval_without_requirement": ('decision := {"decision": "require_approval", "reasons": []}', "policy_invalid_decision"),
    "undefined": ('decision := {"decision": "allow"} if input.never_set', "policy_invalid_decision"),
    "wrong_package_query": ("other := 1", "policy_invalid_decision"),
    "runtime_error": ('decision := {"decision": "allow", "n": to_number("not a number")}', "policy_unavailable"),
    "conflicting_values": (
        'decision := {"decision": "allow"} if true\ndecision := {"decision": "deny"} if input.args',
        "policy_unavailable",
    ),
}


def _gateway_config(tmp_path: Path, body: str):
    return demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "bundle", HEADER + body + "\n"))})


@pytest.mark.parametrize("name", sorted(CASES))
async def test_bad_decisions_deny_and_never_execute(tmp_path, name):
    body, code = CASES[name]
    cfg = _gateway_config(tmp_path, body)
    resp = await call_once(cfg, "count_call", '{"n": 1}')
    assert resp.WhichOneof("outcome") == "refused"
    assert resp.refused.code in {"policy_invalid_decision", "policy_unavailable"}
    assert resp.refused.code == code, resp.refused
    assert calls_recorded(cfg.data_path / "sandbox", "count_call") == 0
    records = [r for r in audit_records(cfg.audit_path) if r["decision_id"] == resp.decision_id]
    policy = [s for s in audit_steps(cfg.audit_path) if s["decision_id"] == resp.decision_id and s["stage"] == "policy"]
    assert policy and policy[0]["code"] == code and policy[0]["detail"]
    assert records[-1]["stage"] == "result" and records[-1]["executed"] is False


async def test_policy_reload_keeps_the_old_policy_when_the_new_one_is_broken(tmp_path):
    cfg = _gateway_config(tmp_path, 'decision := {"decision": "allow", "reasons": []}')
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        version = running.app.engine.version
        (cfg.policy_bundle_path / "policy.rego").write_text(HEADER + "decision := {{{ not rego")
        assert await running.app.reload_policy() is False
        assert running.app.engine.version == version
        assert (await client.call("echo", "{}")).code == "ok"
        (cfg.policy_bundle_path / "policy.rego").write_text(HEADER + 'decision := {"decision": "deny", "reasons": ["closed"]}')
        assert await running.app.reload_policy() is True
        resp = await client.call("echo", "{}")
        assert resp.code == "policy_denied" and resp.policy_version != version
    finally:
        await client.close()
        await running.stop()
    stages = [r["code"] for r in audit_records(cfg.audit_path) if r["stage"] == "policy_reload"]
    assert stages == ["policy_reload_failed", "ok"]
