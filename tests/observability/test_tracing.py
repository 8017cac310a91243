"""OpenTelemetry spans: one ``toolgate.call`` span per call with a child span per stage."""

from __future__ import annotations

import hashlib

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway import tracing
from gateway.testing import start_gateway
from tests.observability._support import Client, make_config


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.disable()


async def test_each_call_is_a_span_with_a_child_per_stage(tmp_path, spans):
    config = make_config(tmp_path)
    tracing.configure(config, exporter=spans)
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        ok = await client.call("echo", {"secret_looking": "do-not-trace"})
        denied = await client.call("echo_denied", {})
    finally:
        await client.close()
        await running.stop()
    finished = spans.get_finished_spans()
    calls = {s.attributes["toolgate.decision_id"]: s for s in finished if s.name == "toolgate.call"}
    assert set(calls) == {ok.decision_id, denied.decision_id}
    call = calls[ok.decision_id]
    children = sorted((s for s in finished if s.parent and s.parent.span_id == call.context.span_id), key=lambda s: s.start_time)
    assert [s.name for s in children] == [
        "toolgate.authenticate", "toolgate.resolve", "toolgate.validate", "toolgate.policy", "toolgate.credentials",
        "toolgate.admit", "toolgate.execute",
    ][: len(children)]
    assert {"toolgate.policy", "toolgate.execute"} <= {s.name for s in children}
    assert all(call.start_time <= s.start_time <= s.end_time <= call.end_time for s in children)
    assert call.attributes["toolgate.code"] == "ok" and call.attributes["toolgate.executed"] is True
    assert calls[denied.decision_id].attributes["toolgate.code"] == "policy_denied"
    assert not any("do-not-trace" in str(v) for s in finished for v in s.attributes.values())


async def test_an_unknown_tool_name_is_traced_escaped_and_hashed_never_as_sent(tmp_path, spans):
    hostile = "nope\x1b[2J\u202e"
    config = make_config(tmp_path)
    tracing.configure(config, exporter=spans)
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        refused = await client.call(hostile, {})
    finally:
        await client.close()
        await running.stop()
    assert refused.code == "unknown_tool"
    finished = spans.get_finished_spans()
    [resolve] = [s for s in finished if s.name == "toolgate.resolve"]
    assert resolve.attributes["toolgate.tool_escaped"] == "nope\\x1b[2J\\u202e"
    assert resolve.attributes["toolgate.tool_sha256"] == "sha256:" + hashlib.sha256(hostile.encode()).hexdigest()
    assert not any("\x1b" in str(v) or "\u202e" in str(v) for s in finished for v in s.attributes.values())


def test_tracing_is_off_by_default(tmp_path):
    assert tracing.configure(make_config(tmp_path)) is False
    assert tracing.enabled is False
