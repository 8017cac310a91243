"""A gateway killed mid-call: the retry under the same idempotency key never runs the tool
again, and once the claim is older than the tool could run, it gets a definitive
``outcome_unknown`` instead of ``execution_in_progress`` for ever.

A real ``toolgate serve`` killed with SIGKILL while the tool runs, restarted on the same
SQLite file. The lease (``longest_hold``: timeout + grace + a 300 s margin) cannot pass in a
test, so the orphaned claim's ``created`` is moved back in the database file, standing for
that much time passing; nothing else is touched.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from pathlib import Path

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.audit import iter_steps
from gateway.testing import GatewayProcess
from tests.e2e.test_workers import API_KEY, TOOLS_DIR, executions, write_config


async def _call(address: str, key: str, idem: str) -> pb.ToolCallResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        return await pb_grpc.ToolGatewayStub(channel).ExecuteTool(
            pb.ToolCallRequest(tool="count_shared", args_json=f'{{"key": "{key}"}}'.encode(), run_id="r",
                               idempotency_key=idem),
            metadata=(("x-api-key", API_KEY),), timeout=30,
        )


def _running_claims(db: Path, idem: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM claims WHERE key=? AND status='running'", (idem,)).fetchone()[0]


async def test_a_call_orphaned_by_a_crash_is_never_run_again_and_ends_outcome_unknown(tmp_path: Path):
    config = write_config(tmp_path, workers=1)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH", "")]))}
    data, key, idem = tmp_path / "data", f"crash-{uuid.uuid4().hex[:8]}", "idem-crash-1"
    db = data / "toolgate.db"

    gw = GatewayProcess(config, data_dir=data, env=env).start(60.0)
    try:
        in_flight = asyncio.ensure_future(_call(gw.address, key, idem))
        deadline = time.monotonic() + 20
        while not (db.exists() and _running_claims(db, idem)):  # the tool is running (0.3 s delay)
            assert time.monotonic() < deadline, "the call never claimed its key"
            await asyncio.sleep(0.01)
        gw.kill()
        try:
            await in_flight
        except grpc.RpcError:
            pass
    finally:
        gw.kill()
    assert _running_claims(db, idem) == 1  # the claim outlived its process
    ran_before_the_kill = executions(tmp_path, key)  # 0 or 1: the gateway cannot know which

    with sqlite3.connect(db) as conn:  # the lease passes
        conn.execute("UPDATE claims SET created = created - 3600 WHERE key=?", (idem,))

    gw = GatewayProcess(config, data_dir=data, env=env).start(60.0)
    try:
        first = await _call(gw.address, key, idem)
        again = await _call(gw.address, key, idem)
        fresh = await _call(gw.address, key, "idem-crash-2")
    finally:
        gw.stop()

    assert (first.code, first.replayed) == ("outcome_unknown", True), first
    assert first.WhichOneof("outcome") == "refused" and "new key" in first.refused.reasons[0]
    assert (again.code, again.replayed) == ("outcome_unknown", True)
    assert fresh.code == "ok" and not fresh.replayed
    assert executions(tmp_path, key) == ran_before_the_kill + 1  # only the fresh key ran
    assert _running_claims(db, idem) == 0

    steps = [s for s in iter_steps(list(_records(data))) if s.get("stage") == "idempotency"]
    assert sum(1 for s in steps if s.get("abandoned")) == 1
    assert any(s.get("code") == "outcome_unknown" and s.get("abandoned") for s in steps)


def _records(data: Path):
    import json

    for path in sorted(data.glob("audit*.jsonl")):
        for line in path.read_text().splitlines():
            yield json.loads(line)
