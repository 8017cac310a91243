"""What an approver's vote is refused with, and how it is audited: a token living longer than
the gateway allows gets its own code naming the bound (once its signature verified; else the
opaque ``invalid_approval``), a rejection's reason past its bound gets its own code and nothing
changes, and a reason holding terminal controls or line breaks reaches neither the audit log nor
any terminal the CLI prints on unescaped. The Approvals service's refusals are audited through
the one edge helper (``gateway.auth.audit_request``). Over a real gRPC server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import json
import time
import unicodedata
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

import gateway.approvals.servicer as approvals_servicer
from approval_helpers import APPROVER, approval_token, demo_key, serving, write_config
from gateway import auth
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.approvals.keyring import SigningKey
from gateway.audit import escaped
from gateway.audit_verify import verify_file
from gateway.cli import main
from gateway.cli.approvals_cmd import approval_dict, describe
from gateway.cli.client_cmds import response_to_dict
from gateway.terminal import json_text

ARGS = '{"path": "out.txt", "n": 1}'
MAX_LIFETIME = 120
HOSTILE = 'no\x1b[2J\n{"stage":"approval","action":"granted"}\x9b31m\x85\u202eevil\u2028end'
"""A reason that would clear a terminal, forge a log line (LF, NEL, LINE SEPARATOR) or recolour
and reverse text (8-bit CSI, right-to-left override), were it printed or written raw."""


@pytest.fixture
async def short(tmp_path: Path):
    """The demo gateway, allowing approver tokens of at most ``MAX_LIFETIME`` seconds."""
    async with serving(write_config(tmp_path, max_approval_lifetime_seconds=MAX_LIFETIME)) as both:
        yield both


def records(running: Any) -> list[dict[str, Any]]:
    running.app.audit.flush()
    return [json.loads(line) for line in Path(running.app.config.audit_path).read_text().splitlines()]


async def pending(c: Any) -> pb.Approval:
    resp = await c.call("count_write", ARGS)
    assert resp.code == "approval_required", resp
    return await c.get(resp.approval_required.approval_id, APPROVER["alice"])


async def vote(c: Any, a: pb.Approval, token: str, verb: str = "Submit", approver: str = "alice") -> pb.Approval:
    request = (pb.SubmitApprovalRequest if verb == "Submit" else pb.RejectApprovalRequest)(
        approval_id=a.approval_id, token=token)
    return await getattr(c.approvals, verb)(request, metadata=c.md(APPROVER[approver]), timeout=10)


async def refused(c: Any, a: pb.Approval, token: str, verb: str = "Submit") -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await vote(c, a, token, verb)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
    return json.loads(err.value.details())


def safe(text: str) -> bool:
    """No control, format or line-breaking character but the new lines between lines."""
    return not any(unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp")
                   for ch in text.replace("\n", ""))


# -- a token's lifetime -----------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["Submit", "Reject"])
@pytest.mark.parametrize("lifetime", [MAX_LIFETIME + 1, 0])
async def test_a_token_lifetime_out_of_bounds_is_refused_naming_the_bound(short, verb: str, lifetime: int) -> None:
    running, c = short
    a = await pending(c)
    now = int(time.time())
    typ = tokens.TYP_APPROVAL if verb == "Submit" else tokens.TYP_REJECTION
    token = approval_token(a, "alice", typ, iat=now, exp=now + lifetime)
    assert await refused(c, a, token, verb) == {"code": "approval_lifetime_out_of_range", "message": (
        f"the token lives {lifetime} s (exp - iat); this gateway accepts approver tokens living 1 to {MAX_LIFETIME} s "
        "(approvals.max_approval_lifetime_seconds)")}
    about = [r for r in records(running) if r.get("approval_id") == a.approval_id and r["action"] != "requested"]
    assert [(r["action"], r["code"]) for r in about] == [("verification_failed", "approval_lifetime_out_of_range")]
    assert about[0]["reason"] == f"lifetime exp-iat={lifetime}s is outside (0, {MAX_LIFETIME}]"
    assert [r for r in records(running) if r.get("action") == "refused"] == []  # audited once
    after = await c.get(a.approval_id, APPROVER["alice"])
    assert (after.status, list(after.approvers)) == ("pending", [])
    ok = await vote(c, a, approval_token(a, "alice", typ, iat=now, exp=now + MAX_LIFETIME), verb)
    assert ok.status == ("approved" if verb == "Submit" else "rejected")  # the bound itself is accepted


async def test_the_lifetime_is_named_only_once_the_signature_verified(short) -> None:
    running, c = short
    a = await pending(c)
    now = int(time.time())
    claims = {"iss": "alice", "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": a.args_hash,
              "tenant": a.tenant, "run_id": a.run_id, "iat": now, "exp": now + 3600, "jti": str(uuid.uuid4())}
    forged = tokens.sign(claims, SigningKey(demo_key("alice").kid, demo_key("bob").key), tokens.TYP_APPROVAL)
    assert await refused(c, a, forged) == {"code": "invalid_approval", "message": "invalid approval"}


# -- a rejection's reason ---------------------------------------------------------------------

async def test_a_rejection_reason_past_its_bound_is_refused_and_nothing_changes(gw) -> None:
    running, c = gw
    a = await pending(c)
    token = approval_token(a, "alice", tokens.TYP_REJECTION, reason="x" * 1001)
    assert await refused(c, a, token, "Reject") == {"code": "rejection_reason_too_long", "message": (
        "the rejection's reason has 1001 characters; a gateway keeps at most 1000: sign it again with a shorter one")}
    [record] = [r for r in records(running) if r.get("action") == "refused"]
    assert (record["code"], record["method"], record["user"]) == (
        "rejection_reason_too_long", "/toolgate.v1.Approvals/Reject", "alice")
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "pending"
    out = await vote(c, a, approval_token(a, "alice", tokens.TYP_REJECTION, reason="y" * 1000), "Reject")
    assert (out.status, out.rejection_reason) == ("rejected", "y" * 1000)  # the bound itself, kept whole


async def test_a_hostile_rejection_reason_is_audited_escaped_and_kept_as_signed(gw) -> None:
    running, c = gw
    a = await pending(c)
    out = await vote(c, a, approval_token(a, "alice", tokens.TYP_REJECTION, reason=HOSTILE), "Reject")
    assert out.rejection_reason == HOSTILE  # as signed: for the agent, and for the CLI to show escaped
    running.app.audit.flush()
    lines = Path(running.app.config.audit_path).read_text().splitlines()
    [line] = [x for x in lines if '"action":"rejected"' in x]
    assert line.isascii() and line.isprintable()  # nothing can break, forge or redraw a line of the log
    assert json.loads(line)["reason"] == escaped(HOSTILE, 1000)
    assert verify_file(running.app.config.audit_path).ok


async def test_a_hostile_rejection_reason_reaches_no_terminal_unescaped(gw, capsys) -> None:
    running, c = gw
    a = await pending(c)
    await vote(c, a, approval_token(a, "alice", tokens.TYP_REJECTION, reason=HOSTILE), "Reject")
    shown = await c.get(a.approval_id, APPROVER["alice"])
    retried = await c.call("count_write", ARGS, approval_id=a.approval_id)  # the agent hears the reason
    assert retried.code == "approval_rejected" and HOSTILE in retried.refused.reasons[0]
    outputs = {"approvals show": describe(shown), "approvals show --json": json.dumps(approval_dict(shown), indent=2),
               "call": json_text(response_to_dict(retried), indent=2)}
    running.app.audit.flush()
    assert main(["audit", "search", str(running.app.config.audit_path), "--code", "approval_rejected"]) == 0
    outputs["audit search"] = capsys.readouterr().out
    assert main(["audit", "verify", str(running.app.config.audit_path)]) == 0
    outputs["audit verify"] = capsys.readouterr().out
    for name, text in outputs.items():
        assert safe(text), name
    assert "rejected   no\\u001b[2J\\u000a" in outputs["approvals show"]


def test_the_cli_refuses_a_reason_past_the_bound_before_signing(capsys) -> None:
    code = main(["approvals", "reject", str(uuid.uuid4()), "--key", "/nonexistent/key.pem", "--reason", "r" * 1001,
                 "--yes", "--target", "127.0.0.1:9"])
    err = capsys.readouterr()
    assert (code, err.out) == (2, "")  # nothing fetched, shown or signed
    assert err.err == ("toolgate: reason_too_long: --reason has 1001 characters; a gateway keeps at most 1000: "
                       "say it shorter\n")


# -- one edge helper audits the refusals ------------------------------------------------------

async def test_approvals_refusals_are_audited_by_the_edge_helper_as_before(gw, monkeypatch) -> None:
    running, c = gw
    calls: list[dict[str, Any]] = []

    def spy(*args: Any, **fields: Any) -> str:
        calls.append(fields)
        return auth.audit_request(*args, **fields)

    monkeypatch.setattr(approvals_servicer, "audit_request", spy, raising=False)
    made_up = str(uuid.uuid4())
    with pytest.raises(grpc.aio.AioRpcError):
        await c.get(made_up, APPROVER["alice"])
    assert [(f["stage"], f["action"]) for f in calls] == [("approval", "refused")]
    [record] = [r for r in records(running) if r.get("action") == "refused"]
    assert set(record) == {"stage", "ts", "gateway", "decision_id", "code", "seq", "prev_hash", "hash", "action",
                           "method", "peer", "tenant", "agent", "user", "reason", "at", "approval_id_escaped",
                           "approval_id_sha256", "approval_id_length"}
    assert (record["stage"], record["code"], record["reason"], record["approval_id_escaped"]) == (
        "approval", "invalid_approval", "no such approval request", made_up)
