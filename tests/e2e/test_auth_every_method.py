"""Every method of every toolgate.v1 service refuses a caller without a valid API key.

The methods come from the proto's descriptor, not from a list kept here: a method added to
the proto and served without going through ``AuthenticatedServer`` fails this test.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from google.protobuf import symbol_database

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.testing import start_gateway
from tests.conftest import AGENT_KEY, audit_records, demo_config

METHODS = [
    (service.full_name, method)
    for service in pb.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]


def test_the_proto_has_the_services_we_serve():
    assert {name for name, _ in METHODS} == {"toolgate.v1.ToolGateway", "toolgate.v1.Approvals"}
    assert len(METHODS) >= 7


@pytest.mark.parametrize("metadata", [(), (("x-api-key", "not-a-key"),), (("authorization", "Bearer nope"),)],
                         ids=["no-key", "unknown-key", "unknown-bearer"])
async def test_every_method_refuses_an_unauthenticated_caller(gateway, metadata):
    db = symbol_database.Default()
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        for service, method in METHODS:
            path = f"/{service}/{method.name}"
            request = db.GetSymbol(method.input_type.full_name)()
            response = db.GetSymbol(method.output_type.full_name)
            kind = channel.unary_stream if method.server_streaming else channel.unary_unary
            call = kind(path, request_serializer=type(request).SerializeToString, response_deserializer=response.FromString)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                result = call(request, metadata=metadata, timeout=5)
                if method.server_streaming:
                    async for _ in result:
                        pass
                else:
                    await result
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, path
    refused = [r["method"] for r in audit_records(gateway.app.config.audit_path)
               if r["stage"] == "authenticate" and r["code"] == "unauthenticated"]
    assert sorted(refused) == sorted(f"/{s}/{m.name}" for s, m in METHODS)


UNDECODABLE = b"\xff\xff\xff"
"""Not a protobuf message of any type (a truncated varint where a field tag belongs)."""


def _raw(channel: grpc.aio.Channel, service: str, method: Any) -> Any:
    """``method`` called with bytes as they are, so the server is the first to decode them."""
    kind = channel.unary_stream if method.server_streaming else channel.unary_unary
    return kind(f"/{service}/{method.name}", request_serializer=lambda b: b, response_deserializer=lambda b: b)


async def _refused(call: Any, method: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        if method.server_streaming:
            async for _ in call:
                pass
        else:
            await call
    return err.value


async def test_a_caller_without_a_key_is_refused_before_its_request_is_decoded(gateway):
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        for service, method in METHODS:
            err = await _refused(_raw(channel, service, method)(UNDECODABLE, timeout=5), method)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, method.name  # was UNKNOWN, and not audited
    refused = [r["method"] for r in audit_records(gateway.app.config.audit_path)
               if r["stage"] == "authenticate" and r["code"] == "unauthenticated"]
    assert sorted(refused) == sorted(f"/{s}/{m.name}" for s, m in METHODS)


async def test_an_undecodable_request_with_a_key_is_refused_and_audited(gateway):
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        for service, method in METHODS:
            call = _raw(channel, service, method)(UNDECODABLE, metadata=(("x-api-key", AGENT_KEY),), timeout=5)
            err = await _refused(call, method)
            assert (err.code(), err.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "the request message could not be decoded")
    records = [r for r in audit_records(gateway.app.config.audit_path) if r["stage"] == "request"]
    assert sorted(r["method"] for r in records) == sorted(f"/{s}/{m.name}" for s, m in METHODS)
    assert {(r["code"], r["tenant"], r["agent"], r["user"]) for r in records} == {("invalid_arguments", "acme", "demo-agent", "dana")}


async def test_health_stays_open_for_probes(gateway):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(gateway.address) as channel:
        resp = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def _keyless_flood(address: str, calls: int) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary("/toolgate.v1.ToolGateway/ListTools", request_serializer=pb.ListToolsRequest.SerializeToString,
                                   response_deserializer=pb.ListToolsResponse.FromString)

        async def refused() -> None:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(pb.ListToolsRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

        await asyncio.gather(*(refused() for _ in range(calls)))


def _accounted(audit_path: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """The keyless refusals written one by one, and the counts of the others."""
    records = [r for r in audit_records(audit_path) if r["code"] == "unauthenticated"]
    return [r for r in records if "method" in r], [r["suppressed"] for r in records if "suppressed" in r]


async def test_a_flood_without_a_key_is_counted_not_written_line_by_line(gateway):
    from gateway.auth import REFUSALS_BURST

    await _keyless_flood(gateway.address, 400)
    path = gateway.app.config.audit_path
    deadline = time.monotonic() + 5  # the count of those not written one by one follows, with no later refusal
    while len((found := _accounted(path))[0]) + sum(found[1]) < 400 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    each, counts = _accounted(path)
    assert REFUSALS_BURST <= len(each) < 200 and counts  # not one line each
    assert len(each) + sum(counts) == 400  # yet every refusal accounted for


async def test_counts_not_yet_written_are_written_when_the_gateway_stops(tmp_path):
    running = await start_gateway(demo_config(tmp_path))
    try:
        await _keyless_flood(running.address, 400)
    finally:
        await running.stop()  # at once: the count's timer has not fired yet
    each, counts = _accounted(running.app.config.audit_path)
    assert counts and len(each) + sum(counts) == 400
