"""The approval flow over a real gRPC server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import asyncio
import time
import json
from pathlib import Path

import grpc
import pytest

from approval_helpers import AGENT, APPROVER, OTHER_TENANT, approval_token
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.testing import calls_recorded

ARGS = '{"path": "out.txt", "n": 1}'


def audit(running) -> list[dict]:
    return [json.loads(line) for line in Path(running.app.config.audit_path).read_text().splitlines()]


def sandbox(running) -> Path:
    return Path(running.app.config.data_path) / "sandbox"


async def _request(c, args: str = ARGS, **fields) -> pb.Approval:
    resp = await c.call("count_write", args, **fields)
    assert resp.code == "approval_required", resp
    assert "alice" in resp.approval_required.approvers and "carol" not in resp.approval_required.approvers
    return await c.get(resp.approval_required.approval_id, APPROVER["alice"])


async def _granted(c, args: str = ARGS, **fields) -> tuple[pb.Approval, str]:
    a = await _request(c, args, **fields)
    assert (await c.submit(a, "alice")).status == "approved"
    mine = await c.get(a.approval_id, AGENT)
    assert mine.grant
    return mine, mine.grant


async def test_fifty_concurrent_presenters_of_one_grant_execute_once(gw) -> None:
    running, c = gw
    a, grant = await _granted(c)
    results = await asyncio.gather(*(c.call("count_write", ARGS, approval_grant=grant) for _ in range(50)))
    assert all(r.code == "ok" for r in results), {r.code for r in results}
    assert sum(not r.replayed for r in results) == 1
    assert sum(r.replayed for r in results) == 49
    assert calls_recorded(sandbox(running), "count_write") == 1
    assert (await c.get(a.approval_id, AGENT)).status == "executed"
    actions = [r.get("action") for r in audit(running) if r.get("approval_id") == a.approval_id]
    assert {"requested", "approved", "granted", "grant_verified", "executed"} <= set(actions)
    assert actions.count("executed") == 1


async def test_retry_by_approval_id_executes_and_replays(gw) -> None:
    running, c = gw
    a, _ = await _granted(c)
    first = await c.call("count_write", ARGS, approval_id=a.approval_id)
    again = await c.call("count_write", ARGS, approval_id=a.approval_id)
    assert (first.code, first.replayed, again.code, again.replayed) == ("ok", False, "ok", True)
    assert first.observation.provenance.decision_id == again.observation.provenance.decision_id
    assert calls_recorded(sandbox(running), "count_write") == 1


async def test_changed_arguments_are_refused_with_args_mismatch(gw) -> None:
    running, c = gw
    a, grant = await _granted(c)
    resp = await c.call("count_write", '{"path": "out.txt", "n": 2}', approval_grant=grant)
    assert resp.code == "approval_args_mismatch"
    resp = await c.call("count_write", '{"n": 1, "path": "out.txt"}', approval_grant=grant)  # reordered: same hash
    assert resp.code == "ok" and not resp.replayed
    assert calls_recorded(sandbox(running), "count_write") == 1


async def test_pending_and_rejected_requests_refuse_the_retry(gw) -> None:
    running, c = gw
    a = await _request(c)
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "approval_pending"
    token = approval_token(a, "bob", tokens.TYP_REJECTION)
    out = await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=a.approval_id, token=token),
                                   metadata=c.md(APPROVER["bob"]), timeout=10)
    assert (out.status, out.rejection_reason) == ("rejected", "not today")
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "approval_rejected"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.submit(a, "alice")
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "approval_rejected" in err.value.details()
    assert calls_recorded(sandbox(running), "count_write") == 0


async def test_an_agent_key_can_never_approve_or_list(gw) -> None:
    running, c = gw
    a = await _request(c)
    token = approval_token(a, "alice")
    for rpc, req in ((c.approvals.Submit, pb.SubmitApprovalRequest(approval_id=a.approval_id, token=token)),
                     (c.approvals.Reject, pb.RejectApprovalRequest(approval_id=a.approval_id, token=token)),
                     (c.approvals.List, pb.ListApprovalsRequest())):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(req, metadata=c.md(AGENT), timeout=10)
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.get(a.approval_id, OTHER_TENANT)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    assert (await c.get(a.approval_id, AGENT)).status == "pending"


async def test_approver_token_signed_by_someone_else_is_refused(gw) -> None:
    running, c = gw
    a = await _request(c)
    token = approval_token(a, "bob")  # bob's valid approval, submitted with alice's API key
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.approvals.Submit(pb.SubmitApprovalRequest(approval_id=a.approval_id, token=token),
                                 metadata=c.md(APPROVER["alice"]), timeout=10)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert json.loads(err.value.details()) == {"code": "invalid_approval", "message": "invalid approval"}
    failed = [r for r in audit(running) if r.get("action") == "verification_failed"]
    assert failed and "submitted by 'alice'" in failed[-1]["reason"]


async def test_grant_cannot_be_forged_from_an_approval_or_used_by_another_agent(gw) -> None:
    running, c = gw
    a = await _request(c)
    approval = approval_token(a, "alice")
    assert (await c.call("count_write", ARGS, approval_grant=approval)).code == "invalid_approval"
    mine, grant = await _granted(c, '{"path": "x.txt"}')
    assert (await c.call("count_write", '{"path": "x.txt"}', key=OTHER_TENANT, approval_grant=grant)).code == "invalid_approval"
    assert (await c.call("count_write", '{"path": "x.txt"}', key=OTHER_TENANT, approval_id=mine.approval_id)).code == "invalid_approval"
    assert (await c.call("count_write", '{"path": "x.txt"}', approval_grant=grant, run_id="other-run")).code == "invalid_approval"
    assert calls_recorded(sandbox(running), "count_write") == 0
    assert (await c.get(mine.approval_id, APPROVER["alice"])).grant == ""  # the grant is shown to the requester only


async def test_quorum_two_needs_two_distinct_finance_approvers(gw) -> None:
    running, c = gw
    args = '{"order_id": "ORD-1", "amount": 5000}'
    resp = await c.call("refund", args, evidence_json=b'{"ticket_id": "T-1"}')
    assert resp.code == "approval_required" and resp.approval_required.quorum == 2
    a = await c.get(resp.approval_required.approval_id, APPROVER["bob"])
    assert (await c.submit(a, "bob")).status == "pending"
    assert (await c.submit(a, "bob")).status == "pending"  # same approver twice: still one
    with pytest.raises(grpc.aio.AioRpcError):
        await c.submit(a, "alice")  # alice is ops/security, not finance
    done = await c.submit(a, "carol")
    assert (done.status, sorted(done.approvers)) == ("approved", ["bob", "carol"])
    out = await c.call("refund", args, evidence_json=b'{"ticket_id": "T-1"}', approval_id=a.approval_id)
    assert out.code == "ok", out


async def test_watch_streams_the_grant_to_the_waiting_agent(gw) -> None:
    running, c = gw
    a = await _request(c)
    stream = c.approvals.Watch(pb.WatchApprovalsRequest(approval_id=a.approval_id, include_current=True),
                               metadata=c.md(AGENT), timeout=20)
    first = await stream.read()
    assert (first.type, first.approval.status) == ("current", "pending")
    await c.submit(a, "alice")
    while (event := await stream.read()).approval.status != "approved":
        pass
    stream.cancel()
    assert event.type == "granted" and event.approval.grant
    assert (await c.call("count_write", ARGS, approval_grant=event.approval.grant)).code == "ok"


async def test_expired_request_ends_with_approval_expired(gw) -> None:
    running, c = gw
    a, _ = await _granted(c)
    service = running.app.approvals.service
    service.clock = lambda: a.expires_at.seconds + 1.0  # `now` is a parameter of the service
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "approval_expired"
    assert (await c.get(a.approval_id, AGENT)).status == "expired"
    assert calls_recorded(sandbox(running), "count_write") == 0


async def test_audit_chain_verifies_after_the_flow(gw) -> None:
    from gateway.audit_verify import verify_file

    running, c = gw
    a, grant = await _granted(c)
    await c.call("count_write", ARGS, approval_grant=grant)
    running.app.audit.flush()
    assert verify_file(running.app.config.audit_path).ok
    granted = [r for r in audit(running) if r.get("action") == "granted"]
    assert granted[0]["approvers"] == ["alice"] and granted[0]["at"] > 0


def test_cli_refuses_to_sign_a_hash_it_did_not_compute() -> None:
    from gateway.cli.approvals_cmd import recompute_hash

    honest = pb.Approval(args_json=b'{"b": 1, "a": "x"}', args_hash="")
    mine, _ = recompute_hash(honest)
    assert recompute_hash(pb.Approval(args_json=b'{"a":"x","b":1}', args_hash=mine)) == (mine, "")
    lying = pb.Approval(args_json=b'{"a": "x", "b": 2}', args_hash=mine)
    assert recompute_hash(lying)[1].startswith("the gateway's args hash")
    assert recompute_hash(pb.Approval(args_json=b'{"a": 1, "a": 2}', args_hash=mine))[1]  # not strict JSON


async def test_a_vote_that_reached_quorum_but_stopped_before_the_grant_is_granted_on_resubmit(gw) -> None:
    running, c = gw
    a = await _request(c)
    # the first submit stored alice's vote, then the gateway stopped before it made the grant
    await running.app.approvals.service.store.add_approval_vote(a.approval_id, "alice", "jti-lost", 1.0)
    assert (await c.get(a.approval_id, AGENT)).status == "pending"
    assert (await c.submit(a, "alice")).status == "approved"  # her retry completes it, not stuck pending
    assert (await c.call("count_write", ARGS, approval_id=a.approval_id)).code == "ok"



@pytest.mark.parametrize("bad", ["a\x00b", "\x1b[2Jid", "id\n"])
async def test_an_approval_id_with_control_characters_is_refused_at_the_edge(gw, bad: str) -> None:
    running, c = gw
    assert (await c.call("count_write", ARGS, approval_id=bad)).code == "invalid_arguments"
    for method in (c.get(bad, APPROVER["alice"]), c.approvals.Reject(
            pb.RejectApprovalRequest(approval_id=bad, token="t"), metadata=c.md(APPROVER["alice"]), timeout=10)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await method
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "printable ASCII" in err.value.details()
    assert calls_recorded(sandbox(running), "count_write") == 0


async def test_an_approval_id_that_fails_verification_is_audited_whole(gw) -> None:
    running, c = gw
    approval_id = "apr-" + "x" * 120  # within the envelope's 128 characters, past the 64 once kept
    resp = await c.call("count_write", ARGS, approval_id=approval_id)
    assert resp.code == "invalid_approval", resp
    [failed] = [r for r in audit(running) if r.get("action") == "verification_failed"]
    assert failed["approval_id"] == approval_id


async def test_a_grant_used_after_its_ttl_is_approval_expired_and_says_to_ask_again(gw) -> None:
    """The request is still approved (its own expiry is later) but the grant's ``exp`` has passed:
    ``approval_expired`` with what to do, not the opaque ``invalid_approval`` a forged grant gets."""
    running, c = gw
    a, grant = await _granted(c)
    service = running.app.approvals.service
    late = a.created_at.seconds + service.settings.grant_ttl_seconds + service.settings.clock_skew_seconds + 1
    assert late < a.expires_at.seconds
    service.clock = lambda: float(late)
    for fields in ({"approval_grant": grant}, {"approval_id": a.approval_id}):
        resp = await c.call("count_write", ARGS, **fields)
        assert resp.code == "approval_expired", resp
        assert "grant for approval" in " ".join(resp.refused.reasons) and "ask for a new approval" in " ".join(resp.refused.reasons)
    assert calls_recorded(sandbox(running), "count_write") == 0
    forged = grant[:-4] + ("AAAA" if not grant.endswith("AAAA") else "BBBB")
    assert (await c.call("count_write", ARGS, approval_grant=forged)).code == "invalid_approval"


async def test_a_late_retry_of_an_executed_approval_is_not_told_to_ask_again(gw) -> None:
    """Its grant was used: a retry past the grant's time-to-live is the opaque invalid_approval,
    never advice to ask for a new approval (which would run the side effect a second time)."""
    running, c = gw
    a, grant = await _granted(c)
    assert (await c.call("count_write", ARGS, approval_grant=grant)).code == "ok"
    service = running.app.approvals.service
    service.clock = lambda: float(a.created_at.seconds + service.settings.grant_ttl_seconds
                                  + service.settings.clock_skew_seconds + 1)
    for fields in ({"approval_grant": grant}, {"approval_id": a.approval_id}):
        assert (await c.call("count_write", ARGS, **fields)).code == "invalid_approval"
    assert calls_recorded(sandbox(running), "count_write") == 1


async def test_a_late_retry_while_the_grant_runs_is_not_told_to_ask_again(gw) -> None:
    """The request reads approved until its call ends (executed is written after the tool): a
    retry past the grant's time-to-live while it runs is invalid_approval, not advice to ask again."""
    running, c = gw
    a, grant = await _granted(c)
    jti = tokens.verify_signature(grant, typ=tokens.TYP_GRANT,
                                  keyring=running.app.approvals.service.grant_keys.keyring).jti
    service = running.app.approvals.service
    await service.store.claim("grant", jti, a.args_hash, time.time())  # as the pipeline holds it while running
    service.clock = lambda: float(a.created_at.seconds + service.settings.grant_ttl_seconds
                                  + service.settings.clock_skew_seconds + 1)
    for fields in ({"approval_grant": grant}, {"approval_id": a.approval_id}):
        assert (await c.call("count_write", ARGS, **fields)).code == "invalid_approval"
