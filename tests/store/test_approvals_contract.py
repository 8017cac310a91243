"""The approval part of the store contract, run alike on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from gateway.store.base import RECENT_SECONDS, ApprovalRecord, ApprovalStatus, VoteStatus
from tests.store import _records
from tests.store._records import T0, listed

S = ApprovalStatus


def record(approval_id: str = "a-1", *, created_at: float = T0, **kw: Any) -> ApprovalRecord:
    """The shared request with a quorum of two, a reversible write and an expiry a fraction past 900 s."""
    contract = dict(quorum=2, risk={"side_effect": "write", "reversibility": "reversible"},
                    expires_at=created_at + 900.123456)
    return _records.record(approval_id, created_at=created_at, **{**contract, **kw})


async def test_created_approval_reads_back_equal(store):
    rec = record()
    await store.create_approval(rec)
    assert await store.get_approval("a-1") == rec
    assert await store.get_approval("missing") is None


async def test_list_is_newest_first_and_filters_tenant_and_status(store):
    await store.create_approval(record("old", created_at=T0))
    await store.create_approval(record("new", created_at=T0 + 10))
    await store.create_approval(record("other", tenant="globex", created_at=T0 + 5))
    await store.transition_approval("old", from_status=S.PENDING, to_status=S.REJECTED, now=T0 + 20)
    assert [r.approval_id for r in await listed(store)] == ["new", "old"]
    assert [r.approval_id for r in await listed(store, tenant="globex")] == ["other"]
    assert [r.approval_id for r in await listed(store, status=S.PENDING)] == ["new"]
    assert [r.approval_id for r in await listed(store, limit=1)] == ["new"]


async def test_votes_count_each_approver_once_in_order(store):
    await store.create_approval(record())
    first = await store.add_approval_vote("a-1", "alice", "jti-1", T0 + 1)
    again = await store.add_approval_vote("a-1", "alice", "jti-2", T0 + 2)
    second = await store.add_approval_vote("a-1", "bob", "jti-3", T0 + 3)
    assert (first.status, first.approvers) == (VoteStatus.ADDED, ("alice",))
    assert (again.status, again.approvers) == (VoteStatus.SAME_APPROVER, ("alice",))
    assert (second.status, second.approvers) == (VoteStatus.ADDED, ("alice", "bob"))


async def test_a_replayed_approval_token_is_refused(store):
    await store.create_approval(record("a-1"))
    await store.create_approval(record("a-2"))
    await store.add_approval_vote("a-1", "alice", "jti-1", T0)
    assert (await store.add_approval_vote("a-1", "alice", "jti-1", T0)).status is VoteStatus.JTI_REUSED
    assert (await store.add_approval_vote("a-2", "alice", "jti-1", T0)).status is VoteStatus.JTI_REUSED


async def test_votes_on_missing_or_settled_requests_are_refused(store):
    await store.create_approval(record())
    await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.REJECTED, now=T0, rejection_reason="no")
    assert (await store.add_approval_vote("a-1", "alice", "jti-1", T0)).status is VoteStatus.NOT_PENDING
    assert (await store.add_approval_vote("zzz", "alice", "jti-2", T0)).status is VoteStatus.NOT_FOUND


async def test_transition_is_compare_and_set(store):
    await store.create_approval(record())
    new = await store.transition_approval(
        "a-1", from_status=S.PENDING, to_status=S.APPROVED, now=T0 + 5,
        approvers=("alice", "bob"), grant="eyJ.grant.sig", grant_jti="g-1",
    )
    assert new == dataclasses.replace(
        record(), status=S.APPROVED, approvers=("alice", "bob"), grant="eyJ.grant.sig", grant_jti="g-1", updated_at=T0 + 5
    )
    assert await store.get_approval("a-1") == new
    assert await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.EXPIRED, now=T0 + 6) is None
    assert (await store.get_approval("a-1")).status is S.APPROVED
    assert await store.transition_approval("nope", from_status=S.PENDING, to_status=S.EXPIRED, now=T0) is None


async def test_concurrent_transitions_over_two_replicas_have_one_winner(make_store):
    one, two = make_store(), make_store()
    await one.create_approval(record())
    results = await asyncio.gather(*(
        (one if i % 2 else two).transition_approval(
            "a-1", from_status=S.PENDING, to_status=S.APPROVED, now=T0, grant_jti=f"g-{i}"
        )
        for i in range(20)
    ))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert (await two.get_approval("a-1")).grant_jti == winners[0].grant_jti


async def test_concurrent_votes_over_two_replicas_count_each_approver_once(make_store):
    one, two = make_store(), make_store()
    await one.create_approval(record())
    votes = await asyncio.gather(*(
        (one if i % 2 else two).add_approval_vote("a-1", ("alice", "bob", "carol")[i % 3], f"jti-{i}", T0 + i)
        for i in range(30)
    ))
    assert sum(v.status is VoteStatus.ADDED for v in votes) == 3
    assert sorted((await one.add_approval_vote("a-1", "dave", "jti-x", T0 + 99)).approvers) == ["alice", "bob", "carol", "dave"]


async def test_changed_approvals_reads_what_changed_since_oldest_change_first(make_store):
    one, two = make_store(), make_store()  # two replicas (or workers) over one database
    await one.create_approval(record("a"))
    await two.create_approval(record("b"))
    await one.create_approval(record("x", tenant="globex"))
    first, since = await two.changed_approvals(tenant="acme", since=None)
    assert [r.approval_id for r in first] == ["a", "b"]  # created in the last few seconds, this tenant only
    await asyncio.sleep(RECENT_SECONDS + 0.2)
    assert (await one.changed_approvals(tenant="acme", since=since))[0] == first  # asked again from `since`
    later, since = await one.changed_approvals(tenant="acme", since=None)
    assert later == []  # nothing changed lately
    voted = await two.transition_approval("a", from_status=S.PENDING, to_status=S.PENDING, now=T0 + 1,
                                          approvers=("alice",))
    changed, _ = await one.changed_approvals(tenant="acme", since=since)
    assert changed == [voted]  # b did not change; a vote through the other replica did


async def test_changed_approvals_pages_from_the_last_stamp(store):
    for i in range(5):
        await store.create_approval(record(f"a-{i}"))
    page, since = await store.changed_approvals(tenant="acme", since=None, limit=3)
    assert [r.approval_id for r in page] == ["a-0", "a-1", "a-2"]
    rest, _ = await store.changed_approvals(tenant="acme", since=since, limit=3)
    assert [r.approval_id for r in rest] == ["a-2", "a-3", "a-4"]  # the last one again: same stamp, re-read


def test_an_sqlite_file_from_before_change_stamps_is_brought_up_to_date(tmp_path):
    import sqlite3

    from gateway.store.sqlite import SQLiteStore

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("""CREATE TABLE approvals (approval_id TEXT PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL,
                  created_at REAL NOT NULL, record TEXT NOT NULL)""")
    db.execute("INSERT INTO approvals VALUES ('old', 'pending', 'acme', 1700000000.0, '{}')")
    db.commit()
    db.close()

    async def reopen() -> None:
        for _ in range(2):  # and again: the migration applies once
            store = SQLiteStore(path)
            assert store.db.execute("SELECT changed_at FROM approvals").fetchall() == [(1700000000.0,)]
            await store.close()

    asyncio.run(reopen())


# -- NUL characters: PostgreSQL's jsonb and text cannot hold one; the store must anyway ------------

NUL = "\x00"


async def test_an_approval_holding_nul_characters_round_trips(make_store):
    one, two = make_store(), make_store()
    rec = record(
        args_json='{"path":"a\\u0000b.txt"}',  # canonical JSON escapes the argument's NUL
        reasons=(f"writes to a{NUL}b.txt need ops approval",),  # a policy reason quoting it does not
        risk={"side_effect": "write", "note": f"x{NUL}y"},
    )
    await one.create_approval(rec)
    assert await two.get_approval("a-1") == rec
    assert await listed(two, status=S.PENDING) == [rec]
    assert (await two.changed_approvals(tenant="acme", since=None))[0] == [rec]
    voted = await two.transition_approval("a-1", from_status=S.PENDING, to_status=S.PENDING, now=T0 + 1,
                                          approvers=(f"al{NUL}ice",))
    assert voted == dataclasses.replace(rec, approvers=(f"al{NUL}ice",), updated_at=T0 + 1)
    rejected = await one.transition_approval("a-1", from_status=S.PENDING, to_status=S.REJECTED, now=T0 + 2,
                                             rejection_reason=f"not a{NUL}b.txt")
    assert rejected == dataclasses.replace(voted, status=S.REJECTED, rejection_reason=f"not a{NUL}b.txt",
                                           updated_at=T0 + 2)
    assert await two.get_approval("a-1") == rejected
    assert await listed(two, status=S.REJECTED) == [rejected]
    assert (await one.changed_approvals(tenant="acme", since=None))[0] == [rejected]


async def test_a_vote_token_id_holding_nul_is_counted_and_not_replayed(store):
    await store.create_approval(record())
    first = await store.add_approval_vote("a-1", "alice", f"jti{NUL}1", T0)
    assert (first.status, first.approvers) == (VoteStatus.ADDED, ("alice",))
    assert (await store.add_approval_vote("a-1", "alice", f"jti{NUL}1", T0 + 1)).status is VoteStatus.JTI_REUSED
    assert (await store.add_approval_vote("a-1", "bob", "jti", T0 + 2)).approvers == ("alice", "bob")


async def test_an_approval_id_holding_nul_finds_nothing(store):
    await store.create_approval(record())
    assert await store.get_approval(f"a-1{NUL}") is None  # a caller may send any id; stored ones never hold NUL
    assert (await store.add_approval_vote(f"a-1{NUL}", "alice", "jti-1", T0)).status is VoteStatus.NOT_FOUND
    assert await store.transition_approval(f"a-1{NUL}", from_status=S.PENDING, to_status=S.REJECTED, now=T0) is None


async def test_pending_requests_are_found_by_their_request_key(store):
    from gateway.store.base import record_request_key

    mine = record("mine", created_at=T0)
    key = record_request_key(mine)
    await store.create_approval(mine)
    await store.create_approval(record("again", created_at=T0 + 1))  # the same request, made again
    await store.create_approval(record("done", created_at=T0 + 2))
    await store.transition_approval("done", from_status=S.PENDING, to_status=S.REJECTED, now=T0 + 3)
    await store.create_approval(record("other_args", created_at=T0 + 4, args_hash="sha256:other"))
    await store.create_approval(record("other_tenant", created_at=T0 + 5, tenant="globex"))
    await store.create_approval(record("other_quorum", created_at=T0 + 6, quorum=3))
    found = await store.pending_approvals(tenant="acme", request_key=key)
    assert [r.approval_id for r in found] == ["again", "mine"]
    assert found[1] == mine
    assert [r.approval_id for r in await store.pending_approvals(tenant="acme", request_key=key, limit=1)] == ["again"]
    assert await store.pending_approvals(tenant="globex", request_key=key) == [
        await store.get_approval("other_tenant")]
    assert await store.pending_approvals(tenant="acme", request_key="sha256:none") == []


async def test_each_vote_keeps_the_key_it_was_signed_with_in_order(store):
    """What a vote counts by (``ApprovalService._counted``): its approver and key, every vote, in order."""
    await store.create_approval(record())
    await store.add_approval_vote("a-1", "alice", "jti-1", T0 + 1, key="alice-1#aa")
    await store.add_approval_vote("a-1", "alice", "jti-2", T0 + 2, key="alice-2#bb")
    last = await store.add_approval_vote("a-1", "bob", "jti-3", T0 + 3, key="bob-1#cc")
    assert last.approvers == ("alice", "bob")
    assert last.keys == (("alice", "alice-1#aa"), ("alice", "alice-2#bb"), ("bob", "bob-1#cc"))
    refused = await store.add_approval_vote("a-1", "carol", "jti-3", T0 + 4, key="carol-1#dd")
    assert refused.status is VoteStatus.JTI_REUSED and refused.keys == last.keys
