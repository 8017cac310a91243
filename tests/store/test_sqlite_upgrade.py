"""A SQLite file made by an earlier version opens: its approvals table gets the columns added since
(``changed_at``, ``request_key``), its rows read back, and new requests are found by their key; its
votes table gets ``approver_key``, "" for the votes made before (which name no key, so count for none)."""

from __future__ import annotations

import sqlite3

from gateway.store.base import record_request_key
from gateway.store.sqlite import SQLiteStore
from tests.store._records import T0, record


async def test_an_earlier_file_is_brought_up_to_the_schema(tmp_path):
    path = tmp_path / "toolgate.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE approvals (approval_id TEXT PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL, "
               "created_at REAL NOT NULL, record TEXT NOT NULL)")
    store = SQLiteStore(tmp_path / "made-now.db")
    old = record("old", created_at=T0)
    await store.create_approval(old)
    text = store.db.execute("SELECT record FROM approvals").fetchone()[0]
    await store.close()
    db.execute("INSERT INTO approvals VALUES (?, ?, ?, ?, ?)", ("old", "pending", "acme", T0, text))
    db.commit()
    db.close()

    store = SQLiteStore(path)
    try:
        columns = {row[1] for row in store.db.execute("PRAGMA table_info(approvals)")}
        assert {"changed_at", "request_key"} <= columns
        assert await store.get_approval("old") == old
        assert await store.pending_approvals(tenant="acme", request_key=record_request_key(old)) == []
        new = record("new", created_at=T0 + 1)
        await store.create_approval(new)
        assert await store.pending_approvals(tenant="acme", request_key=record_request_key(new)) == [new]
    finally:
        await store.close()


async def test_votes_made_before_keys_were_recorded_name_none(tmp_path):
    path = tmp_path / "toolgate.db"
    store = SQLiteStore(path)
    await store.create_approval(record("a-1", created_at=T0))
    await store.close()
    db = sqlite3.connect(path)  # the votes table as an earlier version made it, one vote in it
    db.execute("DROP TABLE approval_votes")
    db.execute("CREATE TABLE approval_votes (jti TEXT PRIMARY KEY, approval_id TEXT NOT NULL, approver TEXT NOT NULL, "
               "created REAL NOT NULL)")
    db.execute("INSERT INTO approval_votes VALUES ('jti-1', 'a-1', 'alice', ?)", (T0,))
    db.commit()
    db.close()

    store = SQLiteStore(path)
    try:
        vote = await store.add_approval_vote("a-1", "bob", "jti-2", T0 + 1, key="bob-1#cc")
        assert vote.keys == (("alice", ""), ("bob", "bob-1#cc"))
    finally:
        await store.close()



async def test_a_vote_reads_its_requests_votes_by_index(tmp_path):
    """Votes are kept for good (the record of who approved): read without an index, every vote
    read every vote ever cast, in a file made now or by an earlier version."""
    path = tmp_path / "toolgate.db"
    db = sqlite3.connect(path)  # an earlier version's votes table, without the index
    db.execute("CREATE TABLE approval_votes (jti TEXT PRIMARY KEY, approval_id TEXT NOT NULL, approver TEXT NOT NULL, "
               "created REAL NOT NULL)")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    try:
        await store.create_approval(record("a-1", created_at=T0))
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        await store.add_approval_vote("a-1", "alice", "jti-1", T0 + 1, key="alice-1#aa")
        store.db.set_trace_callback(None)
        reads = [s for s in statements if s.lstrip().startswith("SELECT") and "FROM approval_votes WHERE approval_id" in s]
        assert reads
        for query in reads:
            plan = " ".join(row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + query))
            assert "approval_votes_approval" in plan, plan
    finally:
        await store.close()
