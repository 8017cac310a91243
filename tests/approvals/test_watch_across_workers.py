"""Approvals.Watch hears changes made through another gateway process on the same store.

Two real gateways (gRPC on 127.0.0.1, port 0) share one SQLite file, as two workers do;
each has its own data folder and audit log. What one does reaches the other's watchers only
through the store (gateway.approvals.follow)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
import yaml

from approval_helpers import AGENT, APPROVER, OTHER_TENANT, Clients, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.testing import next_event_about as _next, start_gateway

ARGS = '{"n": 1, "path": "notes/x.txt"}'


@pytest.fixture
async def pair(tmp_path: Path):
    """Gateways A and B on one store, and a client for each."""
    running, clients = [], []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        config = write_config(tmp_path / name)
        raw = yaml.safe_load(config.read_text())
        raw["store"] = {**raw.get("store", {}), "kind": "sqlite", "path": str(tmp_path / "shared.db")}
        config.write_text(yaml.safe_dump(raw))
        running.append(await start_gateway(config))
        clients.append(Clients(running[-1].address))
    try:
        yield clients
    finally:
        for c in clients:
            await c.channel.close()
        for r in running:
            await r.stop()


def _watch(c: Clients, approval_id: str = "", *, key: str = AGENT, include_current: bool = False):
    return c.approvals.Watch(pb.WatchApprovalsRequest(approval_id=approval_id, include_current=include_current),
                             metadata=c.md(key), timeout=30)


async def _request(c: Clients, key: str = AGENT) -> pb.Approval:
    resp = await c.call("count_write", ARGS, key=key)
    assert resp.code == "approval_required", resp
    return await c.get(resp.approval_required.approval_id, APPROVER["alice"] if key == AGENT else key)


async def test_the_agents_watch_hears_the_grant_made_through_the_other_gateway(pair) -> None:
    a, b = pair
    request = await _request(a)
    stream = _watch(a, request.approval_id, include_current=True)
    try:
        assert (await _next(stream, request.approval_id)).type == "current"
        await b.submit(await b.get(request.approval_id, APPROVER["alice"]), "alice")
        granted = await _next(stream, request.approval_id)
        assert (granted.type, granted.approval.status) == ("granted", "approved") and granted.approval.grant
    finally:
        stream.cancel()


async def test_an_approvers_watch_hears_requests_and_votes_made_elsewhere_once(pair) -> None:
    a, b = pair
    stream = _watch(b, key=APPROVER["bob"])
    try:
        await stream.initial_metadata()  # the stream is live before the request is made
        request = await _request(a)
        heard = await _next(stream, request.approval_id)
        assert (heard.type, heard.approval.status) == ("requested", "pending")
        await a.approvals.Reject(pb.RejectApprovalRequest(approval_id=request.approval_id, token=_rejection(request)),
                                 metadata=a.md(APPROVER["alice"]), timeout=10)
        rejected = await _next(stream, request.approval_id)
        assert (rejected.type, rejected.approval.status) == ("rejected", "rejected")
        with pytest.raises(asyncio.TimeoutError):  # each change once, though A's store reads see it again
            await _next(stream, request.approval_id, within=2.5)
    finally:
        stream.cancel()


async def test_a_change_heard_in_process_is_not_heard_again_from_the_store(pair) -> None:
    """Watch and vote on the same gateway: the in-process event comes first, and the store read
    a tick later finds nothing new."""
    a, _ = pair
    request = await _request(a)
    stream = _watch(a, request.approval_id)
    try:
        await stream.initial_metadata()  # live before the vote
        await a.submit(request, "alice")
        kinds = [(await _next(stream, request.approval_id)).type for _ in range(2)]
        assert kinds == ["approved", "granted"]
        with pytest.raises(asyncio.TimeoutError):
            await _next(stream, request.approval_id, within=2.5)
    finally:
        stream.cancel()


async def test_what_the_store_read_tells_stays_within_the_tenant_and_the_grant_with_its_agent(pair) -> None:
    """Read from the store, as from the hub: an approver hears only their own tenant's requests
    and never sees a grant; only the requesting agent does."""
    a, b = pair
    stream = _watch(b, key=APPROVER["bob"])
    heard: list[pb.ApprovalEvent] = []

    async def until_granted() -> None:
        while not heard or heard[-1].type != "granted":
            event = await stream.read()
            assert event is not grpc.aio.EOF
            heard.append(event)

    try:
        await asyncio.sleep(0.2)
        theirs = await _request(a, OTHER_TENANT)  # tenant globex, through the other gateway
        ours = await _request(a)
        await asyncio.sleep(1.5)  # a store read happens while both are pending
        await a.submit(ours, "alice")
        await asyncio.wait_for(until_granted(), 10)
        # the vote and the grant land between two store reads: heard as the latest state
        assert [(e.type, e.approval.approval_id) for e in heard] == [
            ("requested", ours.approval_id), ("granted", ours.approval_id)]
        assert heard[-1].approval.grant == ""  # the approver does not get the agent's grant
        assert theirs.approval_id not in {e.approval.approval_id for e in heard}
    finally:
        stream.cancel()


def _rejection(a: pb.Approval) -> str:
    from approval_helpers import approval_token
    from gateway.approvals import tokens

    return approval_token(a, "alice", tokens.TYP_REJECTION)
