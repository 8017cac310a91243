"""Every refusal of the Approvals service is audited once, like a malformed id at its edge:
event ``approval``, action ``refused``, a stable code, the caller, the method and the id it
named (escaped and hashed). A caller probing ids is answered alike whether the id exists or
not, and every probe is in the log. Token refusals, which the service audits as
``verification_failed``, are not written twice. Over a real gRPC server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from approval_helpers import AGENT, APPROVER, OTHER_TENANT, approval_token, serving, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.audit_verify import verify_file
from gateway.config import IdentityConfig, load_config

ARGS = '{"path": "out.txt", "n": 1}'
ERIN = "erin-agent-key"
"""The demo agent's id, acting for another user (erin): not the requester of dana's requests."""
NO_APPROVER_ID = "approver-role-only-key"
"""The approver role but no approver id (nor user): not an approver to the service."""
REQUESTS = {"Get": pb.GetApprovalRequest, "Submit": pb.SubmitApprovalRequest, "Reject": pb.RejectApprovalRequest,
            "Watch": pb.WatchApprovalsRequest, "List": pb.ListApprovalsRequest}


@pytest.fixture
async def more_keys(tmp_path: Path):
    """The demo gateway plus ERIN and NO_APPROVER_ID, and room for one Approvals.Watch stream."""
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["identities"] += [
        {"name": "erin", "api_key_sha256": hashlib.sha256(ERIN.encode()).hexdigest(), "tenant": "acme",
         "agent": "demo-agent", "user": "erin", "roles": ["agent"]},
    ]
    raw.setdefault("limits", {})["max_watch_streams"] = 1
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    # A config file with such an identity no longer loads (config_inconsistent); the service's own
    # check stands behind that, for a config built in code: added here without validation.
    half = IdentityConfig(name="half-approver", api_key_sha256=hashlib.sha256(NO_APPROVER_ID.encode()).hexdigest(),
                          tenant="acme", roles=["approver"])
    async with serving(config.model_copy(update={"identities": [*config.identities, half]})) as both:
        yield both


def _call(c: Any, method: str, key: str, **fields: Any) -> Any:
    if method in ("Submit", "Reject"):
        fields.setdefault("token", "t")
    return getattr(c.approvals, method)(REQUESTS[method](**fields), metadata=c.md(key), timeout=10)


async def _refused(c: Any, method: str, key: str, **fields: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        call = _call(c, method, key, **fields)
        if method == "Watch":
            async for _ in call:
                pass
        else:
            await call
    return err.value


def _records(running: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(running.app.config.audit_path).read_text().splitlines()]


def _refusals(running: Any) -> list[dict[str, Any]]:
    return [r for r in _records(running) if r.get("stage") == "approval" and r.get("action") == "refused"]


def _sha256(approval_id: str) -> str:
    return "sha256:" + hashlib.sha256(approval_id.encode()).hexdigest()


def _chain_ok(running: Any) -> bool:
    running.app.audit.flush()
    return verify_file(running.app.config.audit_path).ok


async def _pending(c: Any) -> pb.Approval:
    resp = await c.call("count_write", ARGS)
    assert resp.code == "approval_required", resp
    return await c.get(resp.approval_required.approval_id, APPROVER["alice"])


@pytest.mark.parametrize("method", ["Get", "Watch"])
async def test_probing_another_tenants_ids_is_audited_and_answered_alike(gw, method: str) -> None:
    running, c = gw
    real, made_up = (await _pending(c)).approval_id, str(uuid.uuid4())
    answers = [await _refused(c, method, OTHER_TENANT, approval_id=one) for one in (real, made_up)]
    assert {(e.code(), e.details()) for e in answers} == {(grpc.StatusCode.NOT_FOUND, "no such approval request")}
    records = _refusals(running)
    assert [r["approval_id_sha256"] for r in records] == [_sha256(real), _sha256(made_up)]
    for r in records:
        assert (r["code"], r["method"]) == ("invalid_approval", f"/toolgate.v1.Approvals/{method}")
        assert (r["tenant"], r["agent"], r["user"]) == ("globex", "globex-agent", "")
        assert r["reason"] == "no such approval request" and r["decision_id"]
        assert r["peer"].startswith("ipv4:127.0.0.1:")  # where the probe came from, as the other edges record it
    assert _chain_ok(running)


@pytest.mark.parametrize("method", ["Submit", "Reject"])
async def test_an_approver_naming_no_request_is_audited(gw, method: str) -> None:
    running, c = gw
    made_up = str(uuid.uuid4())
    err = await _refused(c, method, APPROVER["alice"], approval_id=made_up)
    assert err.code() is grpc.StatusCode.NOT_FOUND
    (record,) = _refusals(running)
    assert (record["code"], record["method"], record["agent"]) == ("invalid_approval", f"/toolgate.v1.Approvals/{method}", "alice")
    assert record["approval_id_sha256"] == _sha256(made_up) and record["approval_id_escaped"] == made_up


async def test_another_agents_request_is_not_found_in_the_same_tenant_and_audited(more_keys) -> None:
    running, c = more_keys
    real = (await _pending(c)).approval_id  # dana's
    answers = [await _refused(c, "Get", ERIN, approval_id=one) for one in (real, str(uuid.uuid4()))]
    assert {(e.code(), e.details()) for e in answers} == {(grpc.StatusCode.NOT_FOUND, "no such approval request")}
    records = _refusals(running)
    assert [(r["code"], r["user"]) for r in records] == [("invalid_approval", "erin")] * 2
    assert records[0]["approval_id_sha256"] == _sha256(real)


async def test_an_agent_approving_rejecting_or_listing_is_audited_permission_denied(gw) -> None:
    running, c = gw
    a = await _pending(c)
    token = approval_token(a, "alice")
    for method, fields in (("Submit", {"approval_id": a.approval_id, "token": token}),
                           ("Reject", {"approval_id": a.approval_id, "token": token}), ("List", {})):
        assert (await _refused(c, method, AGENT, **fields)).code() is grpc.StatusCode.PERMISSION_DENIED
    records = _refusals(running)
    assert [(r["code"], r["method"]) for r in records] == [
        ("permission_denied", "/toolgate.v1.Approvals/Submit"), ("permission_denied", "/toolgate.v1.Approvals/Reject"),
        ("permission_denied", "/toolgate.v1.Approvals/List")]
    assert {(r["tenant"], r["agent"], r["user"]) for r in records} == {("acme", "demo-agent", "dana")}
    assert [r.get("approval_id_sha256") for r in records] == [_sha256(a.approval_id)] * 2 + [None]  # List names none
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "pending"
    assert _chain_ok(running)


async def test_an_approver_listing_another_tenant_is_audited(gw) -> None:
    running, c = gw
    err = await _refused(c, "List", APPROVER["alice"], tenant="globex")
    assert err.code() is grpc.StatusCode.PERMISSION_DENIED
    (record,) = _refusals(running)
    assert (record["code"], record["method"], record["user"]) == ("permission_denied", "/toolgate.v1.Approvals/List", "alice")
    assert record["reason"] == "approvers see only their own tenant"


async def test_listing_an_unknown_status_is_audited_invalid_arguments(gw) -> None:
    running, c = gw
    err = await _refused(c, "List", APPROVER["alice"], status="nearly\n\u0440\u202e")  # a Cyrillic letter, a bidi override
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT and json.loads(err.details())["code"] == "invalid_arguments"
    (record,) = _refusals(running)
    assert (record["code"], record["method"]) == ("invalid_arguments", "/toolgate.v1.Approvals/List")
    assert record["reason"].isascii() and record["reason"].isprintable()  # the caller's filter, escaped


async def test_a_token_header_the_caller_wrote_reaches_the_log_escaped(gw) -> None:
    running, c = gw
    a = await _pending(c)
    header = {"alg": tokens.ALGORITHM, "typ": tokens.TYP_APPROVAL, "kid": "\u043a\u043b\u044e\u0447\u202e"}
    forged = ".".join(base64.urlsafe_b64encode(part).rstrip(b"=").decode()
                      for part in (json.dumps(header).encode(), b"{}", b"sig"))
    err = await _refused(c, "Submit", APPROVER["alice"], approval_id=a.approval_id, token=forged)
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION and "invalid_approval" in err.details()
    [failed] = [r for r in _records(running) if r.get("action") == "verification_failed"]
    assert "is not in the key ring" in failed["reason"]
    assert failed["reason"].isascii() and failed["reason"].isprintable()  # the kid, escaped
    assert "\\u043a\\u043b" in failed["reason"]


async def test_an_agent_watching_everything_is_audited_permission_denied(gw) -> None:
    running, c = gw
    err = await _refused(c, "Watch", AGENT)
    assert (err.code(), err.details()) == (grpc.StatusCode.PERMISSION_DENIED, "agents may watch only their own request by id")
    (record,) = _refusals(running)
    assert (record["code"], record["method"], record["agent"]) == ("permission_denied", "/toolgate.v1.Approvals/Watch", "demo-agent")
    assert "approval_id_sha256" not in record


async def test_an_approver_role_without_an_approver_id_may_not_watch_everything(more_keys) -> None:
    running, c = more_keys
    err = await _refused(c, "Watch", NO_APPROVER_ID)  # was UNKNOWN: the service's refusal escaped unhandled
    assert err.code() is grpc.StatusCode.PERMISSION_DENIED
    (record,) = _refusals(running)
    assert (record["code"], record["agent"], record["user"]) == ("permission_denied", "half-approver", "")


async def test_a_watch_past_the_stream_limit_is_audited(more_keys) -> None:
    running, c = more_keys
    a = await _pending(c)
    held = _call(c, "Watch", APPROVER["alice"], include_current=True)
    assert (await held.read()).approval.approval_id == a.approval_id  # open: it answered
    try:
        err = await _refused(c, "Watch", AGENT, approval_id=a.approval_id)
    finally:
        held.cancel()
    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    (record,) = _refusals(running)
    assert (record["code"], record["method"], record["agent"]) == ("concurrency_limited", "/toolgate.v1.Approvals/Watch", "demo-agent")
    assert record["approval_id_sha256"] == _sha256(a.approval_id)


async def test_approving_a_rejected_request_is_audited_with_its_code(gw) -> None:
    running, c = gw
    a = await _pending(c)
    no = approval_token(a, "alice", tokens.TYP_REJECTION)
    assert (await _call(c, "Reject", APPROVER["alice"], approval_id=a.approval_id, token=no)).status == "rejected"
    err = await _refused(c, "Submit", APPROVER["bob"], approval_id=a.approval_id, token=approval_token(a, "bob"))
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION and "approval_rejected" in err.details()
    (record,) = _refusals(running)
    assert (record["code"], record["method"], record["user"]) == ("approval_rejected", "/toolgate.v1.Approvals/Submit", "bob")
    assert _chain_ok(running)


async def test_a_refused_token_is_audited_once_as_verification_failed(gw) -> None:
    running, c = gw
    a = await _pending(c)
    bobs = approval_token(a, "bob")
    err = await _refused(c, "Submit", APPROVER["alice"], approval_id=a.approval_id, token=bobs)  # bob's, sent by alice
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION and "invalid_approval" in err.details()
    about = [r["action"] for r in _records(running) if r.get("approval_id") == a.approval_id]
    assert about.count("verification_failed") == 1 and _refusals(running) == []
