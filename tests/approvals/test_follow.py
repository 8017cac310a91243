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
