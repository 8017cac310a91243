"""A stored request the store cannot load whole (its record no JSON, a field it needs missing, a
list stored as text) is listed and shown marked (``MALFORMED_REASON``) instead of failing a
whole ``List``, or ``Get`` of it, with INTERNAL; it is never approved. And a request holding text
that is not UTF-8 can still be written back (its grant used: ``executed``). Over a real gRPC
server on 127.0.0.1 (port 0); the record is damaged in the server's SQLite file."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
import pytest

from approval_helpers import AGENT, APPROVER, approval_token
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.approvals.malformed import MALFORMED_REASON
from gateway.audit_verify import verify_file
from gateway.testing import calls_recorded

ARGS = '{"path": "out.txt", "n": 1}'


def stored(tmp_path: Path, approval_id: str) -> dict[str, Any]:
    with closing(sqlite3.connect(tmp_path / "data" / "toolgate.db", timeout=10)) as db:
        (text,) = db.execute("SELECT record FROM approvals WHERE approval_id=?", (approval_id,)).fetchone()
    return json.loads(text)


def set_record(tmp_path: Path, approval_id: str, record: str | bytes) -> None:
    """Store ``record`` as the request's record, as it is (bytes: not UTF-8, perhaps)."""
    with closing(sqlite3.connect(tmp_path / "data" / "toolgate.db", timeout=10)) as db, db:
        db.execute("UPDATE approvals SET record=CAST(? AS TEXT) WHERE approval_id=?", (record, approval_id))


async def requested(c: Any, args: str = ARGS) -> pb.Approval:
    resp = await c.call("count_write", args)
    assert resp.code == "approval_required", resp
    return await c.get(resp.approval_required.approval_id, APPROVER["alice"])


async def listed(c: Any, **request: Any) -> dict[str, pb.Approval]:
    out = await c.approvals.List(pb.ListApprovalsRequest(**request), metadata=c.md(APPROVER["alice"]), timeout=10)
    return {a.approval_id: a for a in out.approvals}


def audit(running: Any) -> list[dict[str, Any]]:
    running.app.audit.flush()
    return [json.loads(line) for line in Path(running.app.config.audit_path).read_text().splitlines()]


@pytest.mark.parametrize("record,problem", [
    ("{not json", "record: not JSON"),
    ('["count_write"]', "record: not a JSON object (list)"),
    (b'{"tool": "count_write", \xff}', "record: not JSON"),  # bytes that are not UTF-8
], ids=["not-json", "an-array", "not-utf8"])
async def test_a_request_whose_record_cannot_be_read_is_listed_and_shown_marked(
        gw, tmp_path: Path, record: str | bytes, problem: str) -> None:
    running, c = gw
    other = await requested(c, '{"path": "other.txt", "n": 2}')
    a = await requested(c)
    set_record(tmp_path, a.approval_id, record)
    by_id = await listed(c)
    assert by_id[other.approval_id] == other  # the others as ever, unmarked
    damaged = by_id[a.approval_id]
    assert damaged.reasons == [MALFORMED_REASON + problem]
    assert (damaged.approval_id, damaged.tenant, damaged.created_at) == (a.approval_id, a.tenant, a.created_at)
    assert (damaged.tool, damaged.args_hash, list(damaged.groups_any)) == ("", "", [])
    assert damaged.status == "expired"  # no expiry can be read: it ends
    assert await c.get(a.approval_id, APPROVER["alice"]) == damaged
    # whose request it was cannot be read either: no caller's, as an unknown id
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "invalid_approval"
    [expired] = [r for r in audit(running) if r.get("action") == "expired"]
    assert (expired["approval_id"], expired["code"]) == (a.approval_id, "approval_expired")
    assert verify_file(running.app.config.audit_path).ok


async def test_a_request_missing_a_field_can_be_rejected_never_approved(gw, tmp_path: Path) -> None:
    running, c = gw
    a = await requested(c)
    raw = stored(tmp_path, a.approval_id)
    del raw["step"]
    set_record(tmp_path, a.approval_id, json.dumps(raw))
    shown = await c.get(a.approval_id, APPROVER["alice"])
    assert (shown.status, shown.step, shown.reasons[-1]) == ("pending", 0, MALFORMED_REASON + "step: missing")
    assert a.approval_id in await listed(c, status="pending")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.submit(a, "alice")
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert json.loads(err.value.details()) == {
        "code": "invalid_approval",
        "message": "the stored request is malformed (step: missing): it may be rejected, not approved"}
    token = approval_token(a, "bob", tokens.TYP_REJECTION)
    out = await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=a.approval_id, token=token),
                                   metadata=c.md(APPROVER["bob"]), timeout=10)
    assert (out.status, out.rejection_reason, out.reasons[-1]) == ("rejected", "not today",
                                                                   MALFORMED_REASON + "step: missing")
    assert "step" not in stored(tmp_path, a.approval_id)  # written back with the damage, not a stand-in
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "approval_rejected"


async def test_an_approver_group_stored_as_text_is_marked_not_read_as_its_characters(gw, tmp_path: Path) -> None:
    running, c = gw
    a = await requested(c)
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), "groups_any": "ops"}))
    shown = await c.get(a.approval_id, APPROVER["alice"])
    assert (list(shown.groups_any), shown.reasons[-1]) == ([], MALFORMED_REASON + "groups_any: not a list (str)")
    assert (await listed(c))[a.approval_id] == shown
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.submit(a, "alice")
    assert json.loads(err.value.details())["message"] == (
        "the stored request is malformed (groups_any: not a list (str)): no vote can be verified against it or "
        "stored with it; it ends when it expires")


async def test_a_granted_request_holding_text_that_is_not_utf8_is_executed_and_stored_so(
        gw, tmp_path: Path) -> None:
    """The grant was issued before the damage: it runs once, and the store writes the request back
    (``executed``), its lone surrogate escaped."""
    running, c = gw
    a = await requested(c)
    assert (await c.submit(a, "alice")).status == "approved"
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), "reasons": ["quota \udfff"]}))
    first = await c.call("count_write", ARGS, approval_id=a.approval_id)
    again = await c.call("count_write", ARGS, approval_id=a.approval_id)
    assert (first.code, first.replayed, again.code, again.replayed) == ("ok", False, "ok", True)
    assert calls_recorded(Path(running.app.config.data_path) / "sandbox", "count_write") == 1
    shown = await c.get(a.approval_id, AGENT)
    assert (shown.status, shown.reasons[-1]) == (
        "executed", MALFORMED_REASON + "reasons: an item is not UTF-8 text (a lone surrogate)")
    assert stored(tmp_path, a.approval_id)["reasons"] == ["quota \udfff"]
    assert [r["code"] for r in audit(running) if r.get("action") == "executed"] == ["ok"]


@pytest.mark.parametrize("field,value,problem", [
    ("quorum", "2", "quorum: not an integer (str)"),
    ("quorum", 0, "quorum: less than 1"),  # any approvers, or none, would do
    ("quorum", -3, "quorum: less than 1"),
    ("groups_any", "ops", "groups_any: not a list (str)"),
    ("grant_jti", 7, "grant_jti: not text (int)"),
    ("status", "pending", "status: differs from the row's column"),  # the row says approved
])
async def test_a_granted_request_damaged_where_its_grant_is_checked_is_refused_not_run(
        gw, tmp_path: Path, field: str, value: Any, problem: str) -> None:
    """The grant was issued before the damage, but what it is checked against (quorum, groups, the
    grant issued) can no longer be read: the call is refused ``invalid_approval`` and audited, never
    run, never an internal error."""
    running, c = gw
    a = await requested(c)
    assert (await c.submit(a, "alice")).status == "approved"
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), field: value}))
    resp = await c.call("count_write", ARGS, approval_id=a.approval_id)
    assert resp.code == "invalid_approval", resp
    assert calls_recorded(Path(running.app.config.data_path) / "sandbox", "count_write") == 0
    [failed] = [r for r in audit(running) if r.get("action") == "verification_failed"]
    assert problem in failed["reason"], failed


@pytest.mark.parametrize("quorum", [0, -1])
async def test_a_pending_request_whose_quorum_is_below_one_is_never_approved(gw, tmp_path: Path, quorum: int) -> None:
    """A quorum no approver count can fall short of is damage, not a rule: the request may be
    rejected, never approved."""
    running, c = gw
    a = await requested(c)
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), "quorum": quorum}))
    shown = await c.get(a.approval_id, APPROVER["alice"])
    assert (shown.status, shown.damage) == ("pending", "quorum: less than 1"), shown
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.submit(a, "alice")
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert json.loads(err.value.details())["message"] == (
        "the stored request is malformed (quorum: less than 1): it may be rejected, not approved")
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "approval_pending"
    token = approval_token(a, "bob", tokens.TYP_REJECTION)
    out = await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=a.approval_id, token=token),
                                   metadata=c.md(APPROVER["bob"]), timeout=10)
    assert out.status == "rejected"
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "approval_rejected"
    assert calls_recorded(Path(running.app.config.data_path) / "sandbox", "count_write") == 0


@pytest.mark.parametrize("approvers", [None, 7])
async def test_a_pending_request_whose_approvers_are_damaged_answers_pending_not_internal(
        gw, tmp_path: Path, approvers: Any) -> None:
    running, c = gw
    a = await requested(c)
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), "approvers": approvers}))
    resp = await c.call("count_write", ARGS, approval_id=a.approval_id)
    assert resp.code == "approval_pending", resp
    from gateway.approvals.follow import state

    assert state(await running.app.store.get_approval(a.approval_id))[1] == ()  # what Watch compares


async def test_a_rejection_reason_that_is_not_utf8_is_refused_and_a_stored_one_reaches_the_agent(
        gw, tmp_path: Path) -> None:
    running, c = gw
    a = await requested(c)
    # an approver's own signer: its payload JSON escapes a lone surrogate (RFC 8785 refuses to write one)
    import time as _time
    import uuid as _uuid

    from approval_helpers import demo_key

    key, now = demo_key("bob"), int(_time.time())
    claims = {"iss": "bob", "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": a.args_hash,
              "tenant": a.tenant, "run_id": a.run_id, "iat": now, "exp": now + 300, "jti": str(_uuid.uuid4()),
              "reason": "no \udfff"}
    token = tokens._JWS.encode(json.dumps(claims).encode(), key.key, algorithm=tokens.ALGORITHM,
                               headers={"kid": key.kid, "typ": tokens.TYP_REJECTION})
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=a.approval_id, token=token),
                                 metadata=c.md(APPROVER["bob"]), timeout=10)
    assert json.loads(err.value.details())["code"] == "invalid_approval"
    [failed] = [r for r in audit(running) if r.get("action") == "verification_failed"]  # the token's strict claims
    assert (failed["code"], failed["reason"]) == ("invalid_approval", "claims are not a strict JSON object")
    # one stored so anyway (a damaged store): the agent still hears the rejection
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), "status": "rejected",
                                                    "rejection_reason": "no \udfff"}))
    with closing(sqlite3.connect(tmp_path / "data" / "toolgate.db", timeout=10)) as db, db:
        db.execute("UPDATE approvals SET status='rejected' WHERE approval_id=?", (a.approval_id,))
    resp = await c.call("count_write", ARGS, approval_id=a.approval_id)
    assert resp.code == "approval_rejected" and "no ?" in resp.refused.reasons[0], resp


@pytest.mark.parametrize("damage", [{"risk": {"side_effect": "write", "score": 1e400}},
                                    {"a_later_versions_field": 1e400}])
async def test_a_number_that_is_not_finite_is_never_approved_nor_granted(
        gw, tmp_path: Path, damage: dict[str, Any]) -> None:
    """PostgreSQL's json could not store a grant beside it (the change would be lost while the audit
    said granted): such a request is marked, takes no vote, and a grant issued before is refused."""
    from gateway.approvals.malformed import grant_problem, record_problem, vote_problem

    running, c = gw
    a = await requested(c)
    text = json.dumps({**stored(tmp_path, a.approval_id), **damage})
    set_record(tmp_path, a.approval_id, text)
    rec = await running.app.store.get_approval(a.approval_id)
    assert "not finite" in record_problem(rec) and "not finite" in vote_problem(rec)
    assert "not finite" in grant_problem(rec)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.submit(a, "alice")
    assert json.loads(err.value.details())["code"] == "invalid_approval"


@pytest.mark.parametrize("field,value", [("args_hash", 123), ("grant", 7), ("tool", None)])
async def test_a_granted_request_damaged_where_its_grant_is_checked_shows_the_requester_no_grant(
        gw, tmp_path: Path, field: str, value: Any) -> None:
    """What the gate would refuse is not handed out: the grant is judged on the record as stored,
    not on its salvaged copy (whose stand-ins would pass)."""
    running, c = gw
    a = await requested(c)
    assert (await c.submit(a, "alice")).status == "approved"
    assert (await c.get(a.approval_id, AGENT)).grant  # the requester sees the grant while the record is whole
    set_record(tmp_path, a.approval_id, json.dumps({**stored(tmp_path, a.approval_id), field: value}))
    shown = await c.get(a.approval_id, AGENT)
    assert shown.damage.startswith(f"{field}: "), shown
    assert shown.grant == "", shown
