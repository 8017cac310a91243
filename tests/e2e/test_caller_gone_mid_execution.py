"""A caller that goes away (its deadline passes, it disconnects) after its tool has started does
not stop the tool: it runs to its end (or its own timeout), and its real outcome is what is audited
and stored under the call's key, so a retry hears what happened. ``cancelled`` was stored instead,
and every retry was told so, for a side effect that had happened."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from tests.conftest import audit_records


async def test_the_tool_finishes_and_a_retry_hears_its_outcome(gateway, client, config):
    args = json.dumps({"seconds": 0.6})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await client.stub.ExecuteTool(
            pb.ToolCallRequest(
                tool="sleep", args_json=args.encode(), idempotency_key="k-gone"),
            metadata=client.metadata, timeout=0.2)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.sleep(1.0)  # the tool's 0.6 s, and the storing of its outcome
    again = await client.call("sleep", args, idempotency_key="k-gone")
    assert again.code == "ok" and again.replayed, again
    assert json.loads(again.observation.data_json) == {"slept": 0.6}
    first = [r for r in audit_records(config.audit_path) if r["stage"] == "result"][0]
    assert (first["code"], first["executed"]) == ("ok", True), first


async def test_a_gateway_stopping_still_stops_its_tools_past_the_grace(config):
    """Shutting down is not a caller going away: past the server's grace a call in flight stops its
    tool, is audited ``outcome_unknown`` (it started: it may have had its effect, so a retry with the
    key is not told "cancelled"), and the stop does not wait for the tool's own timeout."""
    from gateway.testing import start_gateway
    from tests.conftest import Client

    running = await start_gateway(config)
    client = Client(running.address)
    call = asyncio.ensure_future(client.call("sleep", json.dumps({"seconds": 20})))
    await asyncio.sleep(0.3)
    started = asyncio.get_running_loop().time()
    await running.stop()  # grace 1 s
    assert asyncio.get_running_loop().time() - started < 10
    with pytest.raises(grpc.aio.AioRpcError):
        await call
    await client.close()
    result = [r for r in audit_records(config.audit_path) if r["stage"] == "result"][-1]
    assert (result["code"], result["executed"]) == ("outcome_unknown", True), result


async def test_a_run_stopped_before_its_first_step_still_ends_the_wait_on_it(tmp_path):
    """The call waits on a future the tool's run sets as its last step. A run cancelled before
    its first step (``drain`` stopping it at once) never takes that step: its done-callback sets
    the future instead, so the call ends (``cancelled``, as the run did) rather than waiting forever."""
    import time

    from gateway.models import CallContext, Identity, ToolCall, new_decision_id
    from gateway.pipeline import _Call
    from gateway.testing import start_gateway
    from tests.conftest import demo_config

    running = await start_gateway(demo_config(tmp_path))
    try:
        pipeline = running.app.pipeline
        ctx = CallContext(new_decision_id(), Identity("acme", "support-bot"), ToolCall("sleep", b"{}"), time.monotonic())
        ctx.tool, ctx.args = pipeline.tools.resolve("sleep"), {"seconds": 5}
        waiting = asyncio.ensure_future(pipeline._execute(_Call(ctx)))
        await asyncio.sleep(0)  # _execute has made the run and waits; the run has taken no step yet
        [run] = pipeline._runs
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, 3)
        assert run.cancelled()
    finally:
        await running.stop()
