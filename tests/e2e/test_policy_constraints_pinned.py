"""Policy may set a constraint the descriptor leaves open, never change one it pins: a decision
setting ``root`` to another value than the descriptor's is refused ``policy_invalid_decision``
before anything runs (which of two values is narrower cannot be told). And the file tools keep
their root inside the data dir's workspace folder whoever set it: a decision's ``root: "."``
replaced the descriptor's, and read_file read the gateway's own audit log."""

from __future__ import annotations

import json

import pytest

from gateway.testing import start_gateway
from tests.conftest import Client, audit_records, demo_config, policy_bundle

HEADER = "package toolgate\nimport rego.v1\nvisible := true\n"


def _config(tmp_path, decided_root, pinned_root=None):
    decision = {"decision": "allow", "reasons": ["ok"], "constraints": {"root": decided_root}}
    bundle = policy_bundle(tmp_path / "bundle", HEADER + f"decision := {json.dumps(decision)}\n")
    cfg = demo_config(tmp_path, policy={"bundle": str(bundle)})
    if pinned_root is not None:
        tools = [t.model_copy(update={"constraints": {"root": pinned_root}}) if t.name == "read_file" else t
                 for t in cfg.tools]
        cfg = cfg.model_copy(update={"tools": tools})
    (cfg.data_path / "workspace" / "acme").mkdir(parents=True)
    (cfg.data_path / "workspace" / "acme" / "note.txt").write_text("inside")
    return cfg


async def _read(cfg, path):
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        await client.call("echo", "{}")  # the audit log has records
        return await client.call("read_file", json.dumps({"path": path}))
    finally:
        await client.close()
        await running.stop()


async def test_a_decision_changing_a_pinned_root_is_refused_before_anything_runs(tmp_path):
    cfg = _config(tmp_path, decided_root=".", pinned_root="workspace/acme")
    response = await _read(cfg, "audit.jsonl")
    assert response.code == "policy_invalid_decision", response
    assert "constraints.root to '.', but the tool pins 'workspace/acme'" in response.refused.reasons[0]
    result = [r for r in audit_records(cfg.audit_path) if r["decision_id"] == response.decision_id][-1]
    assert (result["stage"], result["executed"]) == ("result", False)


async def test_a_decision_repeating_the_pinned_root_runs(tmp_path):
    cfg = _config(tmp_path, decided_root="workspace/acme", pinned_root="workspace/acme")
    response = await _read(cfg, "note.txt")
    assert response.code == "ok" and "inside" in response.observation.data_json.decode(), response


@pytest.mark.parametrize("decided_root", [".", "", "workspace/../audit", "/"])
async def test_a_root_outside_the_workspace_is_refused_by_the_file_tools(tmp_path, decided_root):
    cfg = _config(tmp_path, decided_root=decided_root)
    response = await _read(cfg, "audit.jsonl")
    assert response.code == "tool_error" and response.observation.error.type == "root_outside_workspace", response
    assert "audit" not in response.observation.data_json.decode()


async def test_a_decision_may_narrow_an_open_root_inside_the_workspace(tmp_path):
    cfg = _config(tmp_path, decided_root="workspace/acme")
    response = await _read(cfg, "note.txt")
    assert response.code == "ok" and "inside" in response.observation.data_json.decode(), response
