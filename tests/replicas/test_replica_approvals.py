"""Approvals across three replicas sharing PostgreSQL: a grant is single-use for all of them,
and a request may be made, approved and executed through different replicas."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.audit import iter_steps
from gateway.testing import next_event_about

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


async def _approved(clients, key: str, *, request_on: int, approve_on: int):
    """Request through one replica, approve (alice, ops) through another; the approval record."""
    resp = await clients[request_on].call("count_approved", {"key": key})
    assert resp.code == "approval_required", resp
    approval_id = resp.approval_required.approval_id
    pending = await clients[approve_on].get(approval_id, as_="alice")
    assert pending.status == "pending" and pending.tool == "count_approved"
    assert (await clients[approve_on].approve(pending, "alice")).status == "approved"
    return approval_id


async def test_one_grant_over_three_replicas_executes_once(cluster, clients):
    key = f"grant-{uuid.uuid4().hex[:8]}"
    approval_id = await _approved(clients, key, request_on=0, approve_on=1)
    grant = (await clients[2].get(approval_id)).grant
    assert grant
    responses = await asyncio.gather(*(
        clients[i % 3].call("count_approved", {"key": key}, approval_grant=grant) for i in range(100)
    ))
    assert [r.code for r in responses] == ["ok"] * 100
    assert sum(not r.replayed for r in responses) == 1
    assert len(cluster.executions(key)) == 1
    for c in clients:
        assert (await c.get(approval_id)).status == "executed"


async def test_requested_on_one_approved_on_another_executed_on_a_third(cluster, clients):
    key = f"flow-{uuid.uuid4().hex[:8]}"
    approval_id = await _approved(clients, key, request_on=0, approve_on=1)
    first = await clients[2].call("count_approved", {"key": key}, approval_id=approval_id)
    assert first.code == "ok" and not first.replayed, first
    again = await clients[0].call("count_approved", {"key": key}, approval_id=approval_id)
    assert again.code == "ok" and again.replayed and again.decision_id == first.decision_id
    assert len(cluster.executions(key)) == 1
    executed = [
        (i, step) for i in range(3) for step in iter_steps(cluster.audit(i))
        if step.get("stage") == "execute" and step.get("decision_id") == first.decision_id
    ]
    assert len(executed) == 1 and executed[0][0] == 2


async def test_changed_arguments_with_a_grant_are_refused_on_another_replica(cluster, clients):
    key = f"mismatch-{uuid.uuid4().hex[:8]}"
    approval_id = await _approved(clients, key, request_on=1, approve_on=2)
    grant = (await clients[1].get(approval_id)).grant
    changed = await clients[0].call("count_approved", {"key": key + "-changed"}, approval_grant=grant)
    assert changed.code == "approval_args_mismatch", changed
    assert cluster.executions(key + "-changed") == []


async def test_a_watch_hears_what_happens_through_other_replicas(cluster, clients):
    """The approver watches on replica 2, the agent requests on 0 and watches there, the
    approval is submitted on 1 and the grant executed on 2: each watcher hears every step,
    once, though no step went through the replica it is connected to."""
    key = f"watch-{uuid.uuid4().hex[:8]}"
    approver = clients[2].watch(as_="bob")
    await approver.initial_metadata()  # the watch is live: what happens from here on is heard
    try:
        resp = await clients[0].call("count_approved", {"key": key})
        assert resp.code == "approval_required", resp
        approval_id = resp.approval_required.approval_id
        requested = await next_event_about(approver, approval_id)
        assert (requested.type, requested.approval.status) == ("requested", "pending")

        agent = clients[0].watch(approval_id, include_current=True)
        try:
            current = await next_event_about(agent, approval_id)
            assert (current.type, current.approval.status) == ("current", "pending")
            await clients[1].approve(await clients[1].get(approval_id, as_="alice"), "alice")
            granted = await next_event_about(agent, approval_id)
            assert (granted.type, granted.approval.status) == ("granted", "approved") and granted.approval.grant
            seen_by_approver = await next_event_about(approver, approval_id)
            assert (seen_by_approver.type, seen_by_approver.approval.status) == ("granted", "approved")

            done = await clients[2].call("count_approved", {"key": key}, approval_grant=granted.approval.grant)
            assert done.code == "ok", done
            executed = await next_event_about(agent, approval_id)
            assert (executed.type, executed.approval.status) == ("executed", "executed")
            assert (await next_event_about(approver, approval_id)).type == "executed"
            with pytest.raises(asyncio.TimeoutError):  # nothing is heard twice
                await next_event_about(agent, approval_id, within=2.5)
        finally:
            agent.cancel()
    finally:
        approver.cancel()
