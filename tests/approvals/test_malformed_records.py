"""A stored approval request the gateway cannot read whole (a damaged store: text that is not
UTF-8, a time out of range, a value of the wrong type) is still listed, shown and watched,
salvaged and marked (its last reason), instead of failing the caller, or a whole ``List``, with
INTERNAL; an approver can reject it (a signed vote, verified as ever, audited) but not approve it.
One damaged in a field a vote binds to, or holding text that is not UTF-8 (the store could not
write it back), can be neither: it is refused, saying why, and ends when it expires. Over a real
gRPC server on 127.0.0.1 (port 0); the record is damaged in the server's SQLite file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from approval_helpers import APPROVER, approval_token
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.approvals.malformed import MALFORMED_REASON
from gateway.audit_verify import verify_file

REJECTABLE: dict[str, tuple[str, Any, str]] = {
    # the field, its new value (as stored JSON), the problem the mark names
    "step-not-a-number": ("step", "seven", "step: not an integer (str)"),
    "risk-not-an-object": ("risk", "high", "risk: not an object (str)"),
}
UNVOTABLE: dict[str, tuple[str, Any, str]] = {
    "tool-not-utf8": ("tool", "count_write\ud800", "tool: not UTF-8 text (a lone surrogate)"),  # a vote binds to it
    "args-not-utf8": ("args_json", '{"path": "\ud800"}', "args_json: not UTF-8 text (a lone surrogate)"),
    "reason-not-utf8": ("reasons", ["\udfff"], "reasons: an item is not UTF-8 text (a lone surrogate)"),
    "risk-nested-not-utf8": ("risk", {"side_effect": ["\ud800"]}, "risk: not UTF-8 text (a lone surrogate)"),
    "risk-key-not-utf8": ("risk", {"\ud800": "write"}, "risk: not UTF-8 text (a lone surrogate)"),
}
DAMAGE = {**REJECTABLE, **UNVOTABLE}


def damage(tmp_path: Path, approval_id: str, field: str, value: Any) -> None:
    """Set ``field`` of the stored record to ``value`` (json.dumps writes a lone surrogate as its escape)."""
    with sqlite3.connect(tmp_path / "data" / "toolgate.db", timeout=10) as db:
        (text,) = db.execute("SELECT record FROM approvals WHERE approval_id=?", (approval_id,)).fetchone()
        raw = json.loads(text)
        raw[field] = value
        db.execute("UPDATE approvals SET record=? WHERE approval_id=?", (json.dumps(raw), approval_id))
    db.close()


async def damaged(c: Any, tmp_path: Path, field: str, value: Any) -> pb.Approval:
    """A pending request for count_write (as the approver saw it, whole) whose ``field`` is then damaged."""
    resp = await c.call("count_write", '{"path": "out.txt", "n": 1}')
    assert resp.code == "approval_required", resp
    whole = await c.get(resp.approval_required.approval_id, APPROVER["alice"])
    damage(tmp_path, whole.approval_id, field, value)
    return whole


STAND_IN = {"tool": "", "step": 0, "reasons": [], "expires_at": Timestamp(), "risk": pb.Risk(),
            "args_json": '{"path": "\ud800"}'.encode("utf-8", "surrogatepass")}  # the arguments as they are
"""What each damaged field is shown as."""


def salvaged(whole: pb.Approval, field: str, problem: str) -> pb.Approval:
    """``whole`` as the gateway shows it once ``field`` is damaged: a stand-in, and marked (``damage``)."""
    out = pb.Approval()
    out.CopyFrom(whole)
    if isinstance(STAND_IN[field], Message):
        getattr(out, field).CopyFrom(STAND_IN[field])
    elif field == "reasons":
        del out.reasons[:]
    else:
        setattr(out, field, STAND_IN[field])
    out.reasons.append(MALFORMED_REASON + problem)  # the mark clients older than ``damage`` read
    out.damage = problem
    return out


def records(running: Any) -> list[dict[str, Any]]:
    running.app.audit.flush()
    return [json.loads(line) for line in Path(running.app.config.audit_path).read_text().splitlines()]


async def reject(c: Any, a: pb.Approval, approver: str = "bob") -> pb.Approval:
    token = approval_token(a, approver, tokens.TYP_REJECTION)
    return await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=a.approval_id, token=token),
                                    metadata=c.md(APPROVER[approver]), timeout=10)


@pytest.mark.parametrize("field,value,problem", DAMAGE.values(), ids=DAMAGE.keys())
async def test_a_record_the_gateway_cannot_read_whole_is_shown_marked_and_listed(
        gw, tmp_path: Path, field: str, value: Any, problem: str) -> None:
    running, c = gw
    other = await c.get((await c.call("count_write", '{"path": "other.txt", "n": 2}')).approval_required.approval_id,
                        APPROVER["alice"])
    a = await damaged(c, tmp_path, field, value)
    shown = await c.get(a.approval_id, APPROVER["alice"])
    assert shown == salvaged(a, field, problem)  # the rest as it was
    listed = await c.approvals.List(pb.ListApprovalsRequest(), metadata=c.md(APPROVER["alice"]), timeout=10)
    by_id = {x.approval_id: x for x in listed.approvals}
    assert by_id[a.approval_id].reasons[-1] == MALFORMED_REASON + problem
    assert by_id[other.approval_id] == other  # the others are listed as ever, unmarked
    watch = c.approvals.Watch(pb.WatchApprovalsRequest(approval_id=a.approval_id, include_current=True),
                              metadata=c.md(APPROVER["alice"]), timeout=10)
    current = await watch.read()
    watch.cancel()
    assert (current.type, current.approval.reasons[-1]) == ("current", MALFORMED_REASON + problem)


@pytest.mark.parametrize("field,value,problem", REJECTABLE.values(), ids=REJECTABLE.keys())
async def test_a_record_the_gateway_cannot_read_whole_can_be_rejected_not_approved(
        gw, tmp_path: Path, field: str, value: Any, problem: str) -> None:
    running, c = gw
    a = await damaged(c, tmp_path, field, value)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.submit(a, "alice")
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert json.loads(err.value.details()) == {
        "code": "invalid_approval", "message": f"the stored request is malformed ({problem}): it may be rejected, not approved"}
    [refused] = [r for r in records(running) if r.get("action") == "refused"]
    assert (refused["code"], refused["user"], refused["method"]) == ("invalid_approval", "alice", "/toolgate.v1.Approvals/Submit")
    out = await reject(c, a)
    assert (out.status, out.rejection_reason, out.reasons[-1]) == ("rejected", "not today", MALFORMED_REASON + problem)
    [rejected] = [r for r in records(running) if r.get("action") == "rejected"]
    assert (rejected["approval_id"], rejected["approver"], rejected["code"]) == (a.approval_id, "bob", "approval_rejected")
    assert (await c.call("count_write", '{"path": "out.txt", "n": 1}', approval_id=a.approval_id)).code == "approval_rejected"
    assert verify_file(running.app.config.audit_path).ok


async def test_a_rejection_of_a_malformed_record_is_verified_as_ever(gw, tmp_path: Path) -> None:
    """Signed by someone else, or bound to another hash: refused, and nothing changes."""
    running, c = gw
    a = await damaged(c, tmp_path, "step", "seven")
    for token in (approval_token(a, "bob", tokens.TYP_REJECTION),  # bob's, submitted by alice below
                  approval_token(a, "alice", tokens.TYP_REJECTION, args_hash="sha256:" + "0" * 64)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=a.approval_id, token=token),
                                     metadata=c.md(APPROVER["alice"]), timeout=10)
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "pending"


@pytest.mark.parametrize("field,value,problem", UNVOTABLE.values(), ids=UNVOTABLE.keys())
async def test_a_record_no_vote_can_count_on_is_refused_saying_why(
        gw, tmp_path: Path, field: str, value: Any, problem: str) -> None:
    running, c = gw
    a = await damaged(c, tmp_path, field, value)
    for verb in (lambda: c.submit(a, "alice"), lambda: reject(c, a)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await verb()
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert json.loads(err.value.details()) == {"code": "invalid_approval", "message": (
            f"the stored request is malformed ({problem}): no vote can be verified against it or stored with it; "
            "it ends when it expires")}
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "pending"
    assert [r["code"] for r in records(running) if r.get("action") == "refused"] == ["invalid_approval"] * 2


async def test_a_record_that_cannot_be_stored_again_is_shown_expired_once_due(gw, tmp_path: Path) -> None:
    running, c = gw
    a = await damaged(c, tmp_path, "args_json", '{"path": "\ud800"}')
    damage(tmp_path, a.approval_id, "expires_at", 1.0)
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "expired"
    listed = await c.approvals.List(pb.ListApprovalsRequest(status="expired"), metadata=c.md(APPROVER["alice"]),
                                    timeout=10)
    assert [x.approval_id for x in listed.approvals] == [a.approval_id]
    assert (await c.call("count_write", '{"path": "out.txt", "n": 1}', approval_id=a.approval_id)).code == "approval_expired"


@pytest.mark.parametrize("expiry,problem", [("tomorrow", "not a number (str)"), (1e13, "out of range"),
                                             (float("inf"), "out of range"), (float("nan"), "out of range")])
async def test_a_record_whose_expiry_is_no_time_is_expired(gw, tmp_path: Path, expiry: Any, problem: str) -> None:
    """Not pending for ever (an infinite or far-future expiry was never due): expired, and audited so."""
    running, c = gw
    a = await damaged(c, tmp_path, "expires_at", expiry)
    shown = await c.get(a.approval_id, APPROVER["alice"])
    assert (shown.status, shown.reasons[-1]) == ("expired", MALFORMED_REASON + "expires_at: " + problem)
    [expired] = [r for r in records(running) if r.get("action") == "expired"]
    assert (expired["approval_id"], expired["code"]) == (a.approval_id, "approval_expired")


async def test_an_identical_call_does_not_reuse_a_malformed_pending_request(gw, tmp_path: Path) -> None:
    running, c = gw
    a = await damaged(c, tmp_path, "step", "seven")
    again = await c.call("count_write", '{"path": "out.txt", "n": 1}')
    assert again.code == "approval_required" and again.approval_required.approval_id != a.approval_id
