"""Prometheus metrics over the real endpoint: decisions by outcome and code, stage latency,
policy decisions, approvals pending. Metrics are process-wide, so tests compare before/after."""

from __future__ import annotations

import asyncio
import time

import httpx
import pydantic
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import metrics
from gateway.store.base import ApprovalRecord, ApprovalStatus

from tests.observability._support import make_config


def scrape() -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"http://127.0.0.1:{metrics.port()}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def delta(before, after, name, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def test_calls_are_counted_by_outcome_and_code(observed):
    _, client = observed
    before = await asyncio.to_thread(scrape)
    assert (await client.call("echo", {"x": 1})).code == "ok"
    assert (await client.call("echo", {"x": 2}, idempotency_key="k1")).code == "ok"
    assert (await client.call("echo", {"x": 2}, idempotency_key="k1")).replayed
    assert (await client.call("echo_denied", {})).code == "policy_denied"
    assert (await client.call("nope", {})).code == "unknown_tool"
    after = await asyncio.to_thread(scrape)
    assert delta(before, after, "toolgate_decisions_total", outcome="executed", code="ok") == 2
    assert delta(before, after, "toolgate_decisions_total", outcome="replayed", code="ok") == 1
    assert delta(before, after, "toolgate_decisions_total", outcome="not_executed", code="policy_denied") == 1
    assert delta(before, after, "toolgate_decisions_total", outcome="not_executed", code="unknown_tool") == 1
    assert delta(before, after, "toolgate_policy_decisions_total", decision="allow") == 2
    assert delta(before, after, "toolgate_policy_decisions_total", decision="deny") == 1
    assert delta(before, after, "toolgate_call_seconds_count", code="ok") == 3


async def test_stage_latency_is_observed_per_stage_and_code(observed):
    _, client = observed
    before = await asyncio.to_thread(scrape)
    await client.call("echo", {"x": 1})
    await client.call("nope", {})
    after = await asyncio.to_thread(scrape)
    for stage in ("authenticate", "resolve", "validate", "policy", "execute"):
        assert delta(before, after, "toolgate_stage_seconds_count", stage=stage, code="ok") >= 1, stage
    assert delta(before, after, "toolgate_stage_seconds_count", stage="resolve", code="unknown_tool") == 1
    assert after[("toolgate_stage_seconds_sum", (("code", "ok"), ("stage", "execute")))] > 0


async def test_approvals_pending_gauge_reads_the_store(observed):
    running, _ = observed
    now = time.time()
    base = dict(
        status=ApprovalStatus.PENDING, tenant="acme", agent="a", user="u", run_id="r", step=1, tool="echo",
        tool_version="1", args_json="{}", args_hash="sha256:x", reasons=(), groups_any=("ops",), quorum=1,
        risk={}, created_at=now, decision_id="d", audience="toolgate-observability",
    )
    await running.app.store.create_approval(ApprovalRecord(approval_id="p1", expires_at=now + 600, **base))
    await running.app.store.create_approval(ApprovalRecord(approval_id="p2", expires_at=now - 1, **base))  # expired
    # a damaged store: an expiry that is no number is past (gateway.approvals.malformed), not a failed scrape
    await running.app.store.create_approval(ApprovalRecord(approval_id="p3", expires_at="tomorrow", **base))
    assert (await asyncio.to_thread(scrape))[("toolgate_approvals_pending", ())] == 1


def test_metrics_are_off_unless_configured(tmp_path):
    assert metrics.observability_config(make_config(tmp_path)).metrics_port is None
    assert metrics.configure(make_config(tmp_path)) is None


def test_a_bad_observability_section_names_the_field(tmp_path):
    # refused when the config is read (the section has its own model in Config), not first at start
    with pytest.raises(pydantic.ValidationError, match=r"observability.metrics_port"):
        make_config(tmp_path, metrics_port="many")
    with pytest.raises(pydantic.ValidationError, match=r"observability.tracing.exporter"):
        make_config(tmp_path, tracing={"exporter": "jaeger"})
