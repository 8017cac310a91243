"""What one process takes on at once (gateway.edge_limits), over a real server: streams that
anyone may open never crowd out the calls of callers with a key, and each limit refuses
cleanly and recoverably."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.testing import start_gateway
from tests.conftest import AGENT_KEY, Client, audit_steps, demo_config

LIMITS = {"max_concurrent_calls": 2, "max_watch_streams": 1, "max_public_streams": 3}


@pytest.fixture
async def small(tmp_path):
    running = await start_gateway(demo_config(tmp_path, limits=LIMITS))
    try:
        yield running
    finally:
        await running.stop()


async def _open_health_watch(channel: grpc.aio.Channel):
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
    first = await stream.read()  # open: it answered
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    return stream


async def test_streams_anyone_may_open_are_capped_apart_from_the_calls(small) -> None:
    async with grpc.aio.insecure_channel(small.address) as anon:  # no key
        held = [await _open_health_watch(anon) for _ in range(LIMITS["max_public_streams"])]
        over = health_pb2_grpc.HealthStub(anon).Watch(health_pb2.HealthCheckRequest(service=""))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await over.read()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        client = Client(small.address)
        try:
            assert (await client.call("echo", '{"x": 1}')).code == "ok"  # calls are not crowded out
        finally:
            await client.close()
        reflect = reflection_pb2_grpc.ServerReflectionStub(anon).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        async for answer in reflect:  # reflection counts apart from health
            assert "toolgate.v1.ToolGateway" in {s.name for s in answer.list_services_response.service}
        held.pop().cancel()
        await asyncio.sleep(0.2)
        held.append(await _open_health_watch(anon))  # a closed stream frees its place
        for stream in held:
            stream.cancel()


async def test_calls_past_the_in_flight_limit_are_refused_and_audited(small) -> None:
    client = Client(small.address)
    try:
        slow = [asyncio.create_task(client.call("sleep", '{"seconds": 1.5}')) for _ in range(2)]
        deadline = time.monotonic() + 5
        while small.app.pipeline.in_flight.open < 2 and time.monotonic() < deadline:  # both slow calls admitted
            await asyncio.sleep(0.01)
        busy = await client.call("echo", '{"x": 1}')
        assert busy.code == "concurrency_limited" and busy.refused.retry_after_seconds == 1
        assert [r.code for r in await asyncio.gather(*slow)] == ["ok", "ok"]
        assert (await client.call("echo", '{"x": 2}')).code == "ok"  # the slots are given back
    finally:
        await client.close()
    steps = [s for s in audit_steps(small.app.config.audit_path) if s.get("decision_id") == busy.decision_id]
    assert [(s["stage"], s["code"]) for s in steps] == [("authenticate", "ok"), ("admit", "concurrency_limited")]


async def test_approval_watch_streams_are_capped(small) -> None:
    async with grpc.aio.insecure_channel(small.address) as channel:
        stub = pb_grpc.ApprovalsStub(channel)
        alice = (("x-api-key", "alice-approver-key"),)
        first = stub.Watch(pb.WatchApprovalsRequest(), metadata=alice)
        await first.initial_metadata()  # the stream is live (it holds its slot)
        second = stub.Watch(pb.WatchApprovalsRequest(), metadata=alice)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await second.read()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "limit" in err.value.details()
        first.cancel()
        await asyncio.sleep(0.3)
        third = stub.Watch(pb.WatchApprovalsRequest(include_current=True), metadata=alice)
        tools = pb_grpc.ToolGatewayStub(channel)
        asked = await tools.ExecuteTool(pb.ToolCallRequest(tool="write_file", args_json=b'{"path": "w.txt", "content": "x"}'),
                                        metadata=(("x-api-key", AGENT_KEY),), timeout=10)
        assert asked.code == "approval_required"
        event = await asyncio.wait_for(third.read(), 5)
        while event.approval.approval_id != asked.approval_required.approval_id:
            event = await asyncio.wait_for(third.read(), 5)
        assert event.type in ("current", "requested")  # this stream is served: current if it was made first
        third.cancel()
