"""A call carries exactly one API key: two (``authorization: Bearer`` and ``x-api-key``, or one
header twice), even the same key twice, are refused UNAUTHENTICATED and audited. The first in
the metadata counted, so the order of two headers (a proxy may add one) chose the tenant."""

from __future__ import annotations

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from tests.conftest import AGENT_KEY, audit_records

OTHER_TENANT_KEY = "other-tenant-key"
TWO_KEYS = {
    "bearer_then_header": (("authorization", f"Bearer {OTHER_TENANT_KEY}"), ("x-api-key", AGENT_KEY)),
    "header_then_bearer": (("x-api-key", AGENT_KEY), ("authorization", f"Bearer {OTHER_TENANT_KEY}")),
    "header_twice": (("x-api-key", AGENT_KEY), ("x-api-key", OTHER_TENANT_KEY)),
    "same_key_twice": (("x-api-key", AGENT_KEY), ("authorization", f"Bearer {AGENT_KEY}")),
}


@pytest.mark.parametrize("metadata", TWO_KEYS.values(), ids=TWO_KEYS.keys())
async def test_two_api_keys_are_refused_whatever_their_order(gateway, config, metadata):
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        stub = pb_grpc.ToolGatewayStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ExecuteTool(pb.ToolCallRequest(tool="echo", args_json=b"{}"), metadata=metadata, timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "send exactly one" in info.value.details()
        one = await stub.ExecuteTool(pb.ToolCallRequest(tool="echo", args_json=b"{}"), metadata=metadata[:1], timeout=10)
        assert one.code == "ok"
    refused = [r for r in audit_records(config.audit_path) if r["stage"] == "authenticate"]
    assert refused and refused[0]["code"] == "unauthenticated", refused
