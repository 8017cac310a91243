"""gateway.approvals.follow: a change is heard once, whether the store read or the in-process
event tells it first. A real SQLite store and the real event hub; the service is reduced to
what the follower asks of it (the store, visibility, expiry)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gateway.approvals.events import EventHub
from gateway.approvals.follow import Follower, change_event, state
from gateway.models import Identity
from gateway.store.base import ApprovalRecord, ApprovalStatus as S
from gateway.store.sqlite import SQLiteStore

T0 = 1_800_000_000.0
BOB = Identity(tenant="acme", agent="", user="bob", roles=frozenset({"approver"}))


def _record(approval_id: str = "a-1", **kw) -> ApprovalRecord:
    fields = dict(
        approval_id=approval_id, status=S.PENDING, tenant="acme", agent="demo-agent", user="dana", run_id="run-1",
        step=1, tool="write_file", tool_version="1", args_json="{}", args_hash="sha256:abc", reasons=("r",),
        groups_any=("ops",), quorum=1, risk={"side_effect": "write"}, created_at=T0, expires_at=T0 + 900,
        decision_id="d-1", audience="toolgate-demo", updated_at=T0,
    )
    return ApprovalRecord(**{**fields, **kw})


@dataclasses.dataclass
class _Service:
    store: SQLiteStore
    now: float = T0

    def clock(self) -> float:
        return self.now

    def visible(self, identity: Identity, rec: ApprovalRecord) -> bool:
        return rec.tenant == identity.tenant

    async def expire_if_due(self, rec: ApprovalRecord) -> ApprovalRecord:
        return rec


async def _heard(follower: Follower, sub, n: int, within: float = 3.0) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []

    async def read() -> None:
        async for kind, rec in follower.events(sub):
            got.append((kind, rec.approval_id))
            if len(got) == n:
                return

    await asyncio.wait_for(read(), within)
    return got


def test_the_event_follows_from_what_changed() -> None:
    pending = _record()
    voted = dataclasses.replace(pending, approvers=("alice",))
    assert change_event(None, pending) == "requested"
    assert change_event(state(pending), pending) is None
    assert change_event(state(pending), voted) == "approved"
    assert change_event(state(voted), dataclasses.replace(voted, status=S.APPROVED, grant_jti="j")) == "granted"
    for final in (S.REJECTED, S.EXPIRED, S.EXECUTED):
        assert change_event(state(voted), dataclasses.replace(voted, status=final)) == str(final)


@pytest.fixture
async def following(tmp_path):
    """A store holding request a-1 (pending), the hub, a subscription and a follower that knows a-1."""
    store = SQLiteStore(tmp_path / "s.db")
    hub = EventHub()
    try:
        await store.create_approval(_record())
        with hub.subscribe(lambda rec: True) as sub:
            follower = Follower(_Service(store), BOB, tick=0.05)
            follower.know([_record()])
            yield store, hub, sub, follower
    finally:
        await store.close()


async def test_a_change_read_from_the_store_first_is_not_heard_again_from_the_hub(following) -> None:
    store, hub, sub, follower = following
    granted = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.APPROVED, now=T0 + 1,
                                              approvers=("alice",), grant="g", grant_jti="j-1")
    assert await _heard(follower, sub, 1) == [("granted", "a-1")]  # from the store
    hub.publish("granted", granted)  # the same change, late, from this process
    await store.create_approval(_record("a-2"))
    assert await _heard(follower, sub, 1) == [("requested", "a-2")]  # next heard: the new request


async def test_a_change_heard_from_the_hub_first_is_not_heard_again_from_the_store(following) -> None:
    store, hub, sub, follower = following
    rejected = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.REJECTED,
                                               now=T0 + 1, rejection_reason="no")
    hub.publish("rejected", rejected)
    assert await _heard(follower, sub, 1) == [("rejected", "a-1")]
    await store.create_approval(_record("a-2"))
    assert await _heard(follower, sub, 1) == [("requested", "a-2")]  # and not a-1 again


class _Counting:
    """The real store, counting what the follower reads from it."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store, self.calls, self.rows = store, 0, 0

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        async def counted(*args, **kwargs):
            got = await method(*args, **kwargs)
            self.calls += 1
            self.rows += len(got[0]) if name == "changed_approvals" else got is not None
            return got

        return counted


async def test_an_approvers_reads_do_not_grow_with_the_pending_requests(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    hub = EventHub()
    try:
        for i in range(1500):
            await store.create_approval(_record(f"p-{i}"))
        store.db.execute("UPDATE approvals SET changed_at = changed_at - 60")  # all made a minute ago
        counting = _Counting(store)
        with hub.subscribe(lambda rec: True) as sub:
            follower = Follower(_Service(counting), BOB, tick=0.05)
            follower.know([r for r, _ in await store.approvals_page(tenant="acme", limit=5000)])
            with pytest.raises(asyncio.TimeoutError):
                await _heard(follower, sub, 1, within=0.5)  # ~10 reads: nothing changed, nothing heard
            assert counting.rows == 0 and 5 <= counting.calls <= 12  # one small query per read, not 1,500 gets
            await store.transition_approval("p-7", from_status=S.PENDING, to_status=S.REJECTED, now=T0 + 1)
            assert await _heard(follower, sub, 1) == [("rejected", "p-7")]
    finally:
        await store.close()


async def test_a_known_request_is_heard_expiring_though_nothing_wrote_it(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    hub = EventHub()

    @dataclasses.dataclass
    class Expiring(_Service):
        async def expire_if_due(self, rec: ApprovalRecord) -> ApprovalRecord:
            if rec.status is S.PENDING and self.now >= rec.expires_at:
                return await self.store.transition_approval(rec.approval_id, from_status=S.PENDING,
                                                            to_status=S.EXPIRED, now=self.now) or rec
            return rec

    try:
        await store.create_approval(_record())
        store.db.execute("UPDATE approvals SET changed_at = changed_at - 60")  # out of the reads' window
        service = Expiring(store)
        with hub.subscribe(lambda rec: True) as sub:
            follower = Follower(service, BOB, tick=0.05)
            follower.know([_record()])
            with pytest.raises(asyncio.TimeoutError):
                await _heard(follower, sub, 1, within=0.3)
            service.now = T0 + 900  # its expiry: only a read of it moves it to expired
            assert await _heard(follower, sub, 1) == [("expired", "a-1")]
    finally:
        await store.close()


async def test_a_stream_by_id_tells_its_requests_final_state_once(tmp_path, monkeypatch) -> None:
    """Final requests are forgotten once a read of recent changes can no longer repeat them; a
    stream by id reads its one request every tick, so forgetting it told its final state again
    every few seconds, for as long as the stream stayed open."""
    monkeypatch.setattr("gateway.approvals.follow.RECENT_SECONDS", 0.05)  # forgotten within a few ticks
    store = SQLiteStore(tmp_path / "s.db")
    try:
        await store.create_approval(_record())
        rejected = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.REJECTED, now=T0 + 1,
                                                   rejection_reason="no")
        agent = Identity(tenant="acme", agent="demo-agent", user="dana", roles=frozenset({"agent"}))
        with EventHub().subscribe(lambda rec: rec.approval_id == "a-1") as sub:
            follower = Follower(_Service(store), agent, "a-1", tick=0.05)
            follower.know([rejected])  # the snapshot told it
            with pytest.raises(asyncio.TimeoutError):
                await _heard(follower, sub, 1, within=1.0)
    finally:
        await store.close()
