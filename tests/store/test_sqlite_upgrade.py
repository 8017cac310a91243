"""A SQLite file made by an earlier version opens: its approvals table gets the columns added since
(``changed_at``, ``request_key``), its rows read back, and new requests are found by their key."""

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
