"""``Store.count_pending_approvals`` (the ``toolgate_approvals_pending`` gauge): pending requests
of every tenant whose expiry is still ahead, counted in the store; a damaged expiry (no number,
out of range) is past, as ``gateway.approvals.malformed.past_expiry`` has it."""

from __future__ import annotations

import psycopg

from gateway.approvals.malformed import MAX_TIME
from gateway.store.base import ApprovalStatus
from tests.store._records import T0, record

S = ApprovalStatus


def _damage(make_store, store, approval_id: str, expiry_json: str) -> None:
    """The stored record with ``expires_at`` written as the JSON text ``expiry_json``."""
    if make_store.kind == "sqlite":
        store.db.execute("UPDATE approvals SET record = json_set(record, '$.expires_at', json(?)) WHERE approval_id=?",
                         (expiry_json, approval_id))
        return
    with psycopg.connect(make_store.dsn) as conn:  # json, not jsonb: the text is kept as written
        text = conn.execute("SELECT record::text FROM approvals WHERE approval_id = %s", (approval_id,)).fetchone()[0]
        head, _, tail = text.partition('"expires_at":')
        rest = tail.lstrip()
        end = min(i for i in (rest.find(","), rest.find("}")) if i >= 0)
        conn.execute("UPDATE approvals SET record = %s::json WHERE approval_id = %s",
                     (f'{head}"expires_at": {expiry_json}{rest[end:]}', approval_id))


async def test_counts_pending_unexpired_requests_of_every_tenant(make_store):
    store = make_store()
    now = T0 + 100
    await store.create_approval(record("open", expires_at=now + 600))
    await store.create_approval(record("open-elsewhere", tenant="globex", expires_at=now + 5))
    await store.create_approval(record("past", expires_at=now - 1))
    await store.create_approval(record("at-now", expires_at=now))
    await store.create_approval(record("rejected", expires_at=now + 600))
    await store.transition_approval("rejected", from_status=S.PENDING, to_status=S.REJECTED, now=now)
    for n, damage in enumerate(['"tomorrow"', "1e400", "-1e400", "null", "[1]", str(MAX_TIME + 1)]):
        await store.create_approval(record(f"damaged-{n}", expires_at=now + 600))
        _damage(make_store, store, f"damaged-{n}", damage)
    assert await store.count_pending_approvals(after=now, until=MAX_TIME) == 2


async def test_the_sqlite_count_leaves_the_event_loop_free(tmp_path, monkeypatch):
    """The count reads every pending request's record; it ran on the loop, where a scrape held
    every call for seconds once thousands of large requests were pending. However long it
    takes now, the loop turns meanwhile."""
    import time

    from gateway.store.sqlite import SQLiteStore
    from tests._timing import LoopTicks

    store = SQLiteStore(tmp_path / "toolgate.db")
    await store.create_approval(record("open", expires_at=T0 + 600))
    count = SQLiteStore._count_pending
    monkeypatch.setattr(SQLiteStore, "_count_pending", lambda self, *a: (time.sleep(0.5), count(self, *a))[1])
    async with LoopTicks() as ticks:
        assert await store.count_pending_approvals(after=T0, until=MAX_TIME) == 1
    assert ticks.count >= 10, ticks.count
    await store.close()


async def test_the_count_is_read_from_the_index_of_pending_expiries(make_store):
    """The count read every pending record, arguments and all: ~0.6 s at a thousand requests of
    250 KB on SQLite, ~6 s on PostgreSQL, past a scrape's timeout. Each store's query is answered
    by its index of pending requests' expiries (the planner says so), not by the records."""
    store = make_store()
    for n in range(20):
        await store.create_approval(record(f"open-{n}", expires_at=T0 + 600 + n))
    if make_store.kind == "sqlite":
        from gateway.store.sqlite import PENDING_COUNT

        plan = " ".join(str(row) for row in store.db.execute("EXPLAIN QUERY PLAN " + PENDING_COUNT, (T0, MAX_TIME)))
    else:
        from gateway.store.postgres import PENDING_COUNT

        with psycopg.connect(make_store.dsn) as conn:
            conn.execute("SET enable_seqscan = off")  # a table this small would be read whole anyway
            plan = " ".join(row[0] for row in conn.execute("EXPLAIN " + PENDING_COUNT, (T0, MAX_TIME)))
    assert "approvals_pending_expiry" in plan, plan
    assert await store.count_pending_approvals(after=T0 + 610, until=MAX_TIME) == 9
