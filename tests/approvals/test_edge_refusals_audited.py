"""A malformed approval_id refused at the Approvals edge (before the store) is audited like the
service's other refusals: event ``refused``, code ``invalid_arguments``, the caller, the method;
the id only escaped to printable ASCII and hashed, so it cannot forge or break log lines.
Over a real gRPC server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from approval_helpers import AGENT, APPROVER, Clients
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.audit_verify import verify_file

BAD_IDS = ["a\x00b", "\x1b[2Jid", "id\n", "a b", "x" * 129, ""]
"""Each malformed shape its own case: NUL, a terminal escape, a line break, a space, too long, empty."""
FORGERS = ['x\n{"stage":"approval","code":"ok","action":"granted"}', "x\u2028y", "x\x85y", "x\x9b2Jy", "x\u202ey"]
"""Ids that would break or forge a line for a reader that splits text lines (LF, LINE SEPARATOR,
NEL) or fool a terminal (8-bit CSI, right-to-left override), were they written raw."""


async def _refused(c: Clients, method: str, approval_id: str, key: str) -> grpc.aio.AioRpcError:
    md = c.md(key)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        if method == "Get":
            await c.approvals.Get(pb.GetApprovalRequest(approval_id=approval_id), metadata=md, timeout=10)
        elif method == "Submit":
            await c.approvals.Submit(pb.SubmitApprovalRequest(approval_id=approval_id, token="t"), metadata=md, timeout=10)
        elif method == "Reject":
            await c.approvals.Reject(pb.RejectApprovalRequest(approval_id=approval_id, token="t"), metadata=md, timeout=10)
        else:
            async for _ in c.approvals.Watch(pb.WatchApprovalsRequest(approval_id=approval_id), metadata=md, timeout=10):
                pass
    return err.value


def _refusals(running: Any) -> list[dict[str, Any]]:
    lines = Path(running.app.config.audit_path).read_bytes().split(b"\n")
    records = [json.loads(line) for line in lines if line]
    return [r for r in records if r.get("stage") == "approval" and r.get("action") == "refused"]


def _sha256(approval_id: str) -> str:
    return "sha256:" + hashlib.sha256(approval_id.encode()).hexdigest()


@pytest.mark.parametrize("method", ["Get", "Submit", "Reject", "Watch"])
async def test_a_malformed_approval_id_refused_at_the_edge_is_audited(gw, method: str) -> None:
    running, c = gw
    bad_ids = [b for b in BAD_IDS if b or method != "Watch"]  # Watch without an id watches everything
    for bad in bad_ids:
        err = await _refused(c, method, bad, APPROVER["alice"])
        assert err.code() is grpc.StatusCode.INVALID_ARGUMENT and "printable ASCII" in err.details()
    records = _refusals(running)
    assert [r["approval_id_sha256"] for r in records] == [_sha256(b) for b in bad_ids]
    for bad, r in zip(bad_ids, records):
        assert r["code"] == "invalid_arguments" and r["method"] == f"/toolgate.v1.Approvals/{method}"
        assert (r["tenant"], r["agent"], r["user"]) == ("acme", "alice", "alice")
        assert r["approval_id_length"] == len(bad) and r["decision_id"]
        assert r["approval_id_escaped"] == bad[:64].encode("unicode_escape").decode()
    running.app.audit.flush()
    assert verify_file(running.app.config.audit_path).ok


async def test_the_refusal_names_the_caller_that_sent_it(gw) -> None:
    running, c = gw
    await _refused(c, "Get", "a\x00b", AGENT)
    (record,) = _refusals(running)
    agent = running.app.authenticator.authenticate(c.md(AGENT))
    assert (record["tenant"], record["agent"], record["user"]) == (agent.tenant, agent.agent, agent.user)


@pytest.mark.parametrize("bad", FORGERS)
async def test_a_hostile_approval_id_cannot_forge_or_break_an_audit_line(gw, bad: str) -> None:
    running, c = gw
    await _refused(c, "Get", bad, APPROVER["alice"])
    text = Path(running.app.config.audit_path).read_text()
    assert bad not in text
    lines = text.splitlines()  # str.splitlines breaks at LINE SEPARATOR and NEL too
    records = [json.loads(line) for line in lines]  # every line a whole record: none broken, none forged
    assert [r["action"] for r in records if r.get("stage") == "approval"] == ["refused"]
    escaped = records[-1]["approval_id_escaped"]
    assert escaped.isascii() and escaped.isprintable()
    assert records[-1]["approval_id_sha256"] == _sha256(bad)
