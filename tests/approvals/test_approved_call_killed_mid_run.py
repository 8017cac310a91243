"""The operator's reproduction: an approved call whose gateway is killed (SIGKILL) while its tool
runs, retried with the same approval id (and grant) after the grant has expired. It is never run
again: ``invalid_approval`` while the claim may still belong to a live call (saying from when it
is ``outcome_unknown``), then ``outcome_unknown`` (audited ``abandoned``), not ``invalid_approval``
for ever.

A real ``toolgate serve`` on SQLite, restarted on the same data dir. The grant lives 5 s
(``grant_ttl_seconds``, no clock skew), so its expiry passes for real; the lease (the tool's
``longest_hold``: timeout + grace + a 300 s margin) cannot, so the orphaned claim's ``created`` is
moved back in the database file, standing for that much time passing; nothing else is touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import uuid
from pathlib import Path

import grpc
import yaml

from approval_helpers import AGENT, APPROVER, ROOT, Clients, write_config
from gateway.approvals import tokens
from gateway.testing import GatewayProcess

TOOLS_DIR = ROOT / "tests" / "replicas"  # _replica_tools.count_shared: counts after its delay


def _config(tmp_path: Path) -> Path:
    path = write_config(tmp_path, grant_ttl_seconds=5, clock_skew_seconds=0)
    raw = yaml.safe_load(path.read_text())
    raw["tools"].append({
        "name": "slow_approved",
        "description": "a write tool that takes 20 s, then records its execution",
        "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        "risk": {"side_effect": "write"},
        "constraints": {"counter": str(tmp_path / "executions.jsonl"), "delay": 20},
        "executor": {"kind": "python", "callable": "_replica_tools:count_shared"},
        "timeout_seconds": 30,
    })
    path.write_text(yaml.safe_dump(raw))
    return path


def _grant_claims(db: Path, status: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM claims WHERE scope='grant' AND status=?", (status,)).fetchone()[0]


def _executions(tmp_path: Path) -> int:
    counter = tmp_path / "executions.jsonl"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def _records(data: Path, action: str) -> list[dict]:
    found = []
    for path in sorted(data.glob("audit*.jsonl")):
        found += [r for r in map(json.loads, path.read_text().splitlines()) if r.get("action") == action]
    return found


async def test_an_approved_call_killed_mid_run_ends_outcome_unknown_after_its_grant_expired(tmp_path: Path) -> None:
    config, data = _config(tmp_path), tmp_path / "data"
    db, args = data / "toolgate.db", json.dumps({"key": uuid.uuid4().hex})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH", "")]))}

    gw = GatewayProcess(config, data_dir=data, env=env).start(60.0)
    c = Clients(gw.address)
    try:
        asked = await c.call("slow_approved", args)
        assert asked.code == "approval_required", asked
        approval_id = asked.approval_required.approval_id
        await c.submit(await c.get(approval_id, APPROVER["alice"]), "alice")
        grant = (await c.get(approval_id, AGENT)).grant
        in_flight = asyncio.ensure_future(c.call("slow_approved", args, approval_id=approval_id))
        deadline = time.monotonic() + 20
        while not (db.exists() and _grant_claims(db, "running")):  # the tool is running (20 s)
            assert time.monotonic() < deadline and not in_flight.done(), "the call never claimed its grant"
            await asyncio.sleep(0.01)
        gw.kill()
        try:
            await in_flight
        except grpc.RpcError:
            pass
    finally:
        gw.kill()
        await c.channel.close()
    assert _grant_claims(db, "running") == 1  # the claim outlived its process
    ran_before_the_kill = _executions(tmp_path)  # 0 or 1: the gateway cannot know which

    expires = tokens.unverified_claims(grant)["exp"]
    while time.time() <= expires + 1:  # the grant's own expiry (5 s, no skew) passes for real
        await asyncio.sleep(0.1)

    gw = GatewayProcess(config, data_dir=data, env=env).start(60.0)
    c = Clients(gw.address)
    try:
        waiting = [await c.call("slow_approved", args, **f) for f in ({"approval_id": approval_id},
                                                                     {"approval_grant": grant})]
        with sqlite3.connect(db) as conn:  # the lease passes
            conn.execute("UPDATE claims SET created = created - 3600 WHERE scope='grant'")
        first = await c.call("slow_approved", args, approval_id=approval_id)
        again = [await c.call("slow_approved", args, **f) for f in ({"approval_id": approval_id},
                                                                   {"approval_grant": grant})]
        status = (await c.get(approval_id, APPROVER["alice"])).status
    finally:
        gw.stop()
        await c.channel.close()

    for w in waiting:  # the claim may still be a live call's: not run, not abandoned, not "ask again"
        assert (w.code, w.replayed) == ("invalid_approval", False), w
        assert "is answered outcome_unknown" in w.refused.reasons[0], w  # and from when
    assert (first.code, first.replayed) == ("outcome_unknown", True), first
    assert all((r.code, r.replayed) == ("outcome_unknown", True) for r in again), again
    assert status == "executed"
    assert _executions(tmp_path) == ran_before_the_kill  # never run again
    assert _grant_claims(db, "running") == 0
    [abandoned] = _records(data, "grant_abandoned")
    assert (abandoned["code"], abandoned["abandoned"], abandoned["approval_id"]) == (
        "outcome_unknown", True, approval_id)
