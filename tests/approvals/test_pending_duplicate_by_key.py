"""An agent asking again for the same call gets its pending request back, found by the request's
key (an index), without the gateway reading its tenant's pending requests: every require_approval
call read the newest 200, arguments and all (up to 256 KiB each), parsed twice on the event loop,
so one agent that had filled its tenant with large requests stalled every tenant's calls (~0.9 s
each). Over a real gateway on 127.0.0.1 (port 0) and its SQLite file."""

from __future__ import annotations

import json
import sqlite3

from gateway.config import load_config
from gateway.store.sqlite import SQLiteStore
from tests.approvals.approval_helpers import serving, write_config


async def test_the_same_call_again_gets_its_pending_request_without_a_scan(tmp_path, monkeypatch):
    path = write_config(tmp_path)
    scans = []
    listed = SQLiteStore.approvals_page

    async def counting(self, **kw):
        scans.append(kw)
        return await listed(self, **kw)

    monkeypatch.setattr(SQLiteStore, "approvals_page", counting)
    async with serving(path) as (_, c):
        others = [(await c.call("count_write", json.dumps({"n": i, "pad": "x" * 1000}))).approval_required.approval_id
                  for i in range(20)]
        first = await c.call("count_write", '{"n": -1}')
        again = await c.call("count_write", '{"n": -1}')
        changed = await c.call("count_write", '{"n": -2}')
    assert len(set(others)) == 20
    assert again.approval_required.approval_id == first.approval_required.approval_id
    assert changed.approval_required.approval_id not in (first.approval_required.approval_id, *others)
    assert scans == []


async def _asked_again_after(tmp_path, change: str) -> tuple[str, str]:
    """The approval ids of one call asked twice, ``change`` run on the stored rows between."""
    path = write_config(tmp_path)
    async with serving(path) as (_, c):
        first = (await c.call("count_write", '{"n": 7}')).approval_required.approval_id
        db = sqlite3.connect(load_config(path).store_path)
        db.execute(change)
        db.commit()
        db.close()
        again = (await c.call("count_write", '{"n": 7}')).approval_required.approval_id
    return first, again


async def test_a_request_stored_before_request_keys_is_not_reused_but_a_new_one_made(tmp_path):
    """Rows written by an earlier version have no request key: the same call makes a new request."""
    first, again = await _asked_again_after(tmp_path, "UPDATE approvals SET request_key = NULL")
    assert again and again != first


async def test_sqlite_finds_the_duplicate_by_the_request_key_index(tmp_path):
    """The planner took the (tenant, status) index for the ORDER BY and read every pending request,
    arguments and all, to reach its request_key (38 ms at 400 pending 256 KiB requests)."""
    from tests.store._records import record

    store = SQLiteStore(tmp_path / "toolgate.db")
    try:
        for i in range(50):
            await store.create_approval(record(f"r{i}", created_at=1_800_000_000.0 + i))
        statements = []
        store.db.set_trace_callback(statements.append)
        await store.pending_approvals(tenant="acme", request_key="k")
        store.db.set_trace_callback(None)
        [query] = [s for s in statements if "request_key" in s]
        plan = " ".join(row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + query))
        assert "approvals_tenant_request" in plan, plan
    finally:
        await store.close()


async def test_a_row_whose_record_is_not_the_request_its_key_says_is_not_reused(tmp_path):
    """The key column is not the record: a row whose record names another call (another
    run here) under the key of this one is never handed back for it."""
    first, again = await _asked_again_after(
        tmp_path, "UPDATE approvals SET record = json_set(record, '$.run_id', 'another-run')")
    assert again and again != first
