"""Stopping the gateway waits for the calls still in flight, then stops their tools, before the
store and the audit log close. A tool whose caller went away (its deadline passed) runs to its
end off any RPC, so the server's grace never waited for it: the log was closed under it, its
result was never written (``write to closed file``) and its claim stayed running. Real gateway
(demo config plus test tools) on 127.0.0.1 port 0; the test's stop has a grace of 1 s."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.testing import start_gateway
from tests.conftest import AGENT_KEY, audit_records, demo_config


async def _abandoned_call(running, seconds: float) -> None:
    """A call to ``sleep`` whose caller gives up after 0.3 s, the tool still running."""
    async with grpc.aio.insecure_channel(running.address) as channel:
        stub = pb_grpc.ToolGatewayStub(channel)
        request = pb.ToolCallRequest(tool="sleep", args_json=b'{"seconds": %g}' % seconds, idempotency_key="k-1")
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.ExecuteTool(request, metadata=(("x-api-key", AGENT_KEY),), timeout=0.3)
        assert gone.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED


def _results(running) -> list[dict]:
    return [r for r in audit_records(running.app.config.audit_path) if r.get("stage") == "result"]


async def test_a_tool_that_ends_within_the_grace_has_its_result_written(tmp_path):
    running = await start_gateway(demo_config(tmp_path))
    await _abandoned_call(running, 0.8)
    await running.stop()
    [result] = _results(running)
    assert (result["code"], result["executed"]) == ("ok", True), audit_records(running.app.config.audit_path)


async def test_a_tool_past_the_grace_is_stopped_and_its_end_written(tmp_path):
    running = await start_gateway(demo_config(tmp_path))
    await _abandoned_call(running, 25)
    began = time.monotonic()
    await running.stop()
    assert time.monotonic() - began < 5  # the grace, twice at most, not the tool's 25 s
    [result] = _results(running)
    assert result["code"] == "outcome_unknown"  # it had started: it may have had its effect
    await asyncio.sleep(0)
