"""``Store.approvals_page``: a tenant's requests newest first, page after page, on SQLite and
PostgreSQL alike: every request once, whatever is made or changed between two pages."""

from __future__ import annotations

import pytest

from gateway.store._pages import BadCursor
from gateway.store.base import ApprovalStatus
from tests.store._records import T0, record

S = ApprovalStatus


async def _all(store, *, limit: int, status: str = "", between=None) -> list[str]:
    seen, after = [], ""
    while True:
        page = await store.approvals_page(tenant="acme", status=status, limit=limit, after=after)
        seen += [r.approval_id for r, _ in page]
        if len(page) < limit:
            return seen
        after = page[-1][1]
        if between is not None:
            await between()


async def test_pages_hold_every_request_once_newest_first_ties_by_id(store):
    # three made in the same instant: the id breaks the tie, so a page boundary between them loses none
    for n, at in [("a", T0), ("b", T0 + 1), ("c", T0 + 1), ("d", T0 + 1), ("e", T0 + 2), ("f", T0 + 3)]:
        await store.create_approval(record(n, created_at=at))
    await store.create_approval(record("other", tenant="globex", created_at=T0 + 9))
    for limit in (1, 2, 3, 4, 10):
        assert await _all(store, limit=limit) == ["f", "e", "d", "c", "b", "a"]


async def test_a_request_made_or_decided_between_pages_moves_nothing(store):
    for n in range(6):
        await store.create_approval(record(f"r{n}", created_at=T0 + n))
    made = iter(range(100, 200))

    async def meanwhile() -> None:  # a newer request, and the newest pending one rejected
        n = next(made)
        await store.create_approval(record(f"r{n}", created_at=T0 + n))
        newest = (await store.approvals_page(tenant="acme", status=S.PENDING, limit=1))[0][0]
        await store.transition_approval(newest.approval_id, from_status=S.PENDING, to_status=S.REJECTED, now=T0 + n)

    # an offset would have skipped one pending request on every page (each page's pending set shrank)
    assert await _all(store, limit=2, status=S.PENDING, between=meanwhile) == ["r5", "r4", "r3", "r2", "r1", "r0"]


async def test_a_status_filter_pages_only_that_status(store):
    for n in range(5):
        await store.create_approval(record(f"r{n}", created_at=T0 + n))
    for n in (1, 3):
        await store.transition_approval(f"r{n}", from_status=S.PENDING, to_status=S.REJECTED, now=T0 + 10)
    assert await _all(store, limit=1, status=S.REJECTED) == ["r3", "r1"]
    assert await _all(store, limit=2, status=S.PENDING) == ["r4", "r2", "r0"]


@pytest.mark.parametrize("cursor", ["nope", "[]", "[1]", '["real", "x", "00"]', '["real", 1.0, "zz"]',
                                    '[true, "a"]', '[1.0, 2]', '{"a": 1}', '["integer", 1, "00", 4]',
                                    '["text", 5, "00"]', '[1.0, "a\\u0000b"]', '["real", NaN, "00"]', "null",
                                    f'["integer", {2**64}, 1]', f'["real", 1.0, {2**64}]', f"[{10**400}, \"x\"]",
                                    '[1.0, "\\ud800"]', "[" * 5000 + "]" * 5000, '["text", "' + "00" * 600 + '", 1]'])
async def test_a_cursor_the_store_did_not_give_is_refused(store, cursor):
    await store.create_approval(record("a"))
    with pytest.raises(BadCursor):
        await store.approvals_page(tenant="acme", after=cursor)


async def test_another_tenants_cursor_shows_only_the_callers_tenant(store):
    await store.create_approval(record("mine", created_at=T0))
    await store.create_approval(record("theirs", tenant="globex", created_at=T0 + 5))
    theirs = (await store.approvals_page(tenant="globex", limit=1))[0][1]
    assert [r.approval_id for r, _ in await store.approvals_page(tenant="acme", after=theirs)] == ["mine"]


async def test_sqlite_pages_a_created_at_that_is_no_number(make_store):
    if make_store.kind != "sqlite":
        pytest.skip("PostgreSQL's created_at is a typed column: it holds only numbers")
    store = make_store()
    for n in range(5):
        await store.create_approval(record(f"r{n}", created_at=T0 + n))
    store.db.execute("UPDATE approvals SET created_at='soon' WHERE approval_id='r1'")
    store.db.execute("UPDATE approvals SET created_at=X'00ff' WHERE approval_id='r3'")
    for limit in (1, 2, 3):
        assert sorted(await _all(store, limit=limit)) == ["r0", "r1", "r2", "r3", "r4"]


async def test_sqlite_pages_rows_whose_id_is_null_or_bytes(make_store):
    """SQLite lets a TEXT primary key hold NULL or bytes (a damaged file); its pages break ties
    by the rowid, which every row has."""
    if make_store.kind != "sqlite":
        pytest.skip("PostgreSQL's approval id is a typed primary key: never NULL, always text")
    store = make_store()
    for n in ("a", "m", "z"):
        await store.create_approval(record(n, created_at=T0))
    store.db.execute("UPDATE approvals SET approval_id=NULL WHERE approval_id='a'")
    store.db.execute("UPDATE approvals SET approval_id=CAST('m' AS BLOB) WHERE approval_id='m'")
    for limit in (1, 2, 3):
        assert len(await _all(store, limit=limit)) == 3
