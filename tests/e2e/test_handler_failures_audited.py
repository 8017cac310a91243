"""A handler that fails unexpectedly (here: the store's table is gone, so every statement on it
fails) still ends in the audit log, and the caller hears a plain INTERNAL naming the record,
never the exception's text (which can carry file paths and SQL). Over a real server on
127.0.0.1 (port 0) with a real SQLite file, broken from a second connection."""

from __future__ import annotations

import sqlite3
from typing import Any

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from tests.conftest import AGENT_KEY, Client, audit_records

APPROVER_KEY = "alice-approver-key"  # acme, roles: [approver]


def _break_approvals_table(gateway: Any) -> None:
    db = sqlite3.connect(gateway.app.config.store_path, isolation_level=None)
    try:
        db.execute("DROP TABLE approvals")
    finally:
        db.close()


def _failures(gateway: Any) -> list[dict[str, Any]]:
    return [r for r in audit_records(gateway.app.config.audit_path)
            if r.get("stage") == "request" and r.get("code") == "internal_error"]


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    return err.value


@pytest.mark.parametrize("method", ["Get", "List", "Watch"])
async def test_a_store_failure_in_an_approvals_method_is_audited_and_answered_internal(gateway, method):
    _break_approvals_table(gateway)
    channel = grpc.aio.insecure_channel(gateway.address)
    try:
        stub = pb_grpc.ApprovalsStub(channel)
        md = (("x-api-key", APPROVER_KEY),)
        call = {
            "Get": lambda: stub.Get(pb.GetApprovalRequest(approval_id="a1"), metadata=md, timeout=10),
            "List": lambda: stub.List(pb.ListApprovalsRequest(), metadata=md, timeout=10),
            "Watch": lambda: stub.Watch(pb.WatchApprovalsRequest(), metadata=md, timeout=10),
        }[method]()
        err = await _refused(call)
    finally:
        await channel.close()

    assert err.code() is grpc.StatusCode.INTERNAL
    details = err.details() or ""
    assert "approvals" not in details and "sqlite" not in details.lower() and "/" not in details  # no SQL, no path
    [record] = _failures(gateway)
    assert record["method"] == f"/toolgate.v1.Approvals/{method}"
    assert (record["tenant"], record["user"]) == ("acme", "alice")
    assert record["error"] == "StoreUnavailable"
    assert record["peer"]
    assert record["decision_id"] in details  # the caller can quote it to whoever reads the log


async def test_a_failure_in_the_call_path_is_still_the_pipeline_s_own_audited_result(gateway):
    """ExecuteTool's failures are the pipeline's (an ``internal_error`` result, audited there);
    the edge adds no second record."""
    db = sqlite3.connect(gateway.app.config.store_path, isolation_level=None)
    db.execute("DROP TABLE claims")
    db.close()
    client = Client(gateway.address, AGENT_KEY)
    try:
        resp = await client.call("lookup_policy", '{"topic": "refunds"}', idempotency_key="k1")
    finally:
        await client.close()
    assert resp.refused.code == "internal_error"
    assert _failures(gateway) == []
    [result] = [r for r in audit_records(gateway.app.config.audit_path)
                if r.get("decision_id") == resp.decision_id and r.get("stage") == "result"]
    assert result["code"] == "internal_error"


async def test_when_the_audit_log_fails_too_the_caller_still_hears_no_exception_text(gateway):
    _break_approvals_table(gateway)
    gateway.app.audit.close()  # every later write to the log fails
    channel = grpc.aio.insecure_channel(gateway.address)
    try:
        stub = pb_grpc.ApprovalsStub(channel)
        err = await _refused(stub.Get(pb.GetApprovalRequest(approval_id="a1"), metadata=(("x-api-key", APPROVER_KEY),),
                                      timeout=10))
    finally:
        await channel.close()
    assert err.code() is grpc.StatusCode.INTERNAL
    assert err.details() == "the gateway failed to process the request"


@pytest.mark.parametrize("case", ["no key", "undecodable", "unknown method"])
async def test_when_the_audit_log_fails_an_edge_refusal_still_goes_out_without_exception_text(gateway, case):
    """The edge's own audit writes (a keyless caller, bytes that do not decode, a method no service
    has) failing must not reach the caller as grpc's UNKNOWN with the OSError's text and path."""
    gateway.app.audit.close()  # every later write to the log fails
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        if case == "no key":
            call = channel.unary_unary("/toolgate.v1.ToolGateway/ListTools")(b"", timeout=10)
            expected = (grpc.StatusCode.UNAUTHENTICATED, "missing or unknown API key (send exactly one)")
        elif case == "undecodable":
            call = channel.unary_unary("/toolgate.v1.ToolGateway/ListTools")(
                b"\xff\xff\xff", metadata=(("x-api-key", AGENT_KEY),), timeout=10)
            expected = (grpc.StatusCode.INTERNAL, "the gateway failed to process the request")
        else:
            call = channel.unary_unary("/nope.v1.Nothing/Call")(b"", timeout=10)
            expected = (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        err = await _refused(call)
    assert (err.code(), err.details()) == expected
