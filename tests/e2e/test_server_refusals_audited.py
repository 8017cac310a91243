"""Refusals made at the gRPC edge, before or outside the pipeline, are in the audit log, over
a real server (and the pipeline's own refusal of a tool name it does not know): a caller with a key, audited once with its identity; a caller that may hold no
key (public streams past their limit, unknown methods), audited through the flood-limited
``RefusalAudit``. What the caller chose (a tool name, a method path) is stored escaped and
hashed, never as sent."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any, Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.auth import REFUSALS_BURST
from gateway.testing import start_gateway
from tests.conftest import AGENT_KEY, Client, audit_records, demo_config

APPROVER_KEY = "alice-approver-key"  # acme, roles: [approver] (no agent role)
HOSTILE = "\x1b[2J\n{\"stage\":\"result\",\"code\":\"ok\"}\u202e"
"""Control, line-breaking and bidi characters: what must never reach the log as sent."""


def _sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _records(gateway: Any, **match: Any) -> list[dict[str, Any]]:
    return [r for r in audit_records(gateway.app.config.audit_path) if all(r.get(k) == v for k, v in match.items())]


async def _until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "the awaited audit record never came"
        await asyncio.sleep(0.02)


async def _accounted(records: Callable[[], list[dict[str, Any]]], key: str, total: int) -> tuple[list, list[int]]:
    """The refusals written one by one (with ``key``) and the counts of the others, once they
    add up to ``total`` (the last count is written a moment after the last refusal)."""
    def split() -> tuple[list, list[int]]:
        found = records()
        return [r for r in found if key in r], [r["suppressed"] for r in found if "suppressed" in r]

    def added_up() -> bool:
        each, counts = split()
        return len(each) + sum(counts) >= total

    await _until(added_up)
    each, counts = split()
    assert len(each) + sum(counts) == total
    return each, counts


def _printable(text: str) -> bool:
    return all(" " <= ch <= "~" for ch in text)


@pytest.fixture
async def small(tmp_path):
    running = await start_gateway(demo_config(tmp_path, limits={"max_public_streams": 1}))
    try:
        yield running
    finally:
        await running.stop()


async def test_list_tools_refused_for_a_key_without_the_agent_role_is_audited(gateway) -> None:
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.ToolGatewayStub(channel).ListTools(
                pb.ListToolsRequest(), metadata=(("x-api-key", APPROVER_KEY),), timeout=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    [record] = _records(gateway, stage="request")
    assert (record["code"], record["method"]) == ("permission_denied", "/toolgate.v1.ToolGateway/ListTools")
    assert (record["tenant"], record["agent"], record["user"]) == ("acme", "alice", "alice")
    assert record["reason"] == err.value.details() and record["peer"].startswith("ipv4:127.0.0.1:")


@pytest.mark.parametrize("tool", ["", HOSTILE * 10], ids=["empty", "too-long-hostile"])
async def test_a_malformed_tool_name_is_audited_once_escaped_and_hashed(gateway, tool) -> None:
    client = Client(gateway.address)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.call(tool)
    finally:
        await client.close()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    records = audit_records(gateway.app.config.audit_path)
    assert [r["stage"] for r in records] == ["request"]  # the pipeline never ran: nothing written twice
    [record] = records
    assert (record["code"], record["method"]) == ("invalid_arguments", "/toolgate.v1.ToolGateway/ExecuteTool")
    assert (record["tenant"], record["agent"], record["user"]) == ("acme", "demo-agent", "dana")
    assert (record["tool_sha256"], record["tool_length"]) == (_sha256(tool), len(tool))
    assert _printable(record["tool_escaped"]) and "tool" not in record
    assert record["tool_escaped"] == tool[:64].encode("unicode_escape").decode("ascii")


async def test_an_unknown_tool_name_reaches_the_pipeline_log_escaped_and_hashed(gateway) -> None:
    tool = "no_such_tool" + HOSTILE  # a valid length: the pipeline, not the edge, refuses it
    client = Client(gateway.address)
    try:
        resp = await client.call(tool)
    finally:
        await client.close()
    assert resp.refused.code == "unknown_tool"
    text = gateway.app.config.audit_path.read_text()
    assert "\u202e" not in text and "\x1b" not in text  # neither character as sent, anywhere
    [result] = _records(gateway, stage="result", decision_id=resp.decision_id)
    assert _printable(result["tool"]) and result["tool"] == tool[:64].encode("unicode_escape").decode("ascii")
    [resolve] = [s for s in result["steps"] if s["stage"] == "resolve"]
    assert resolve["code"] == "unknown_tool" and "tool" not in resolve
    assert (resolve["tool_escaped"], resolve["tool_sha256"], resolve["tool_length"]) == (
        result["tool"], _sha256(tool), len(tool))


async def test_a_public_stream_past_its_limit_is_refused_and_audited(small) -> None:
    async with grpc.aio.insecure_channel(small.address) as anon:  # no key
        held = health_pb2_grpc.HealthStub(anon).Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await held.read()).status == health_pb2.HealthCheckResponse.SERVING
        over = health_pb2_grpc.HealthStub(anon).Watch(health_pb2.HealthCheckRequest(service=""))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await over.read()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        held.cancel()
    [record] = _records(small, stage="admit")
    assert (record["code"], record["method"]) == ("concurrency_limited", "/grpc.health.v1.Health/Watch")
    assert record["peer"].startswith("ipv4:127.0.0.1:")


async def test_a_flood_of_reflection_streams_past_the_limit_is_counted_not_written_line_by_line(small) -> None:
    flood = 150
    async with grpc.aio.insecure_channel(small.address) as anon:
        stub = reflection_pb2_grpc.ServerReflectionStub(anon)
        requests: asyncio.Queue = asyncio.Queue()  # never ends: the first stream stays open

        async def pending() -> Any:
            while True:
                yield await requests.get()

        held = stub.ServerReflectionInfo(pending())
        await requests.put(reflection_pb2.ServerReflectionRequest(list_services=""))
        await held.read()  # open: it answered

        async def refused() -> None:
            ask = iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stub.ServerReflectionInfo(ask):
                    pass
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        await asyncio.gather(*(refused() for _ in range(flood)))
        held.cancel()
    each, counts = await _accounted(lambda: _records(small, stage="admit", code="concurrency_limited"), "method", flood)
    assert {r["method"] for r in each} == {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}
    assert REFUSALS_BURST <= len(each) < flood and counts  # not one line each, yet every one accounted for


@pytest.mark.parametrize("method", ["/nope.v1.Nothing/Call", "/toolgate.v1.ToolGateway/Nope", f"/x.Y/{HOSTILE}"],
                         ids=["unknown-service", "unknown-method", "hostile-path"])
@pytest.mark.parametrize("key", [None, AGENT_KEY], ids=["no-key", "agent-key"])
async def test_a_call_to_an_unknown_method_is_audited_and_unimplemented(gateway, method, key) -> None:
    metadata = (("x-api-key", key),) if key else ()
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await channel.unary_unary(method)(b"", metadata=metadata, timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    [record] = _records(gateway, stage="request")
    assert record["code"] == "unknown_method" and "method" not in record
    assert (record["method_sha256"], record["method_length"]) == (_sha256(method), len(method))
    assert _printable(record["method_escaped"]) and record["peer"].startswith("ipv4:127.0.0.1:")


async def test_a_flood_of_unknown_methods_is_counted_not_written_line_by_line(gateway) -> None:
    flood = 300
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        call = channel.unary_unary("/nope.v1.Nothing/Call")

        async def refused() -> None:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(b"", timeout=5)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED

        await asyncio.gather(*(refused() for _ in range(flood)))
    each, counts = await _accounted(lambda: _records(gateway, stage="request", code="unknown_method"), "method_sha256",
                                    flood)
    assert REFUSALS_BURST <= len(each) < flood and counts  # not one line each, yet every one accounted for


async def test_the_catch_all_is_asked_only_for_methods_no_service_has(tmp_path, monkeypatch) -> None:
    from gateway.server import UnknownMethods

    asked: list[str] = []
    answer = UnknownMethods.service
    monkeypatch.setattr(UnknownMethods, "service",
                        lambda self, details: asked.append(details.method) or answer(self, details))
    running = await start_gateway(demo_config(tmp_path))
    client = Client(running.address)
    try:
        assert (await client.call("echo", '{"x": 1}')).code == "ok"
        assert (await client.stub.ListTools(pb.ListToolsRequest(), metadata=client.metadata, timeout=5)).tools
        approver = (("x-api-key", APPROVER_KEY),)
        await pb_grpc.ApprovalsStub(client.channel).List(pb.ListApprovalsRequest(), metadata=approver, timeout=5)
        await health_pb2_grpc.HealthStub(client.channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert asked == []  # the per-call path never reaches it
        with pytest.raises(grpc.aio.AioRpcError):
            await client.channel.unary_unary("/nope.v1.Nothing/Call")(b"", timeout=5)
        assert asked == ["/nope.v1.Nothing/Call"]
    finally:
        await client.close()
        await running.stop()
