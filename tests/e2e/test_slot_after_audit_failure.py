"""A call admitted (its concurrency slot taken) whose write-ahead ``authorized`` record cannot be
written never runs, and its slot goes back: the slot was kept for good, and a tool with
``max_concurrency: 1`` refused every later call ``concurrency_limited``."""

from __future__ import annotations

import pytest

from gateway.pipeline import Pipeline
from gateway.testing import start_gateway
from tests.conftest import Client, demo_config


@pytest.fixture
def config(tmp_path):
    cfg = demo_config(tmp_path)
    tools = [t.model_copy(update={"max_concurrency": 1}) if t.name == "echo" else t for t in cfg.tools]
    return cfg.model_copy(update={"tools": tools})


async def test_the_slot_of_a_call_whose_authorized_record_failed_goes_back(config, monkeypatch):
    write, failed = Pipeline._write, []

    def disk_full_once(self, c, record, code, **kw):  # the audit disk (fault injected): full once
        if record == "authorized" and not failed:
            failed.append(c.ctx.decision_id)
            raise OSError(28, "No space left on device")
        return write(self, c, record, code, **kw)

    monkeypatch.setattr(Pipeline, "_write", disk_full_once)
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        first = await client.call("echo", '{"n": 1}')
        assert first.code == "internal_error" and failed, first
        again = await client.call("echo", '{"n": 2}')
        assert again.code == "ok", again
    finally:
        await client.close()
        await running.stop()


async def test_the_slot_goes_back_whatever_stops_a_call_between_admit_and_its_run(config, monkeypatch):
    """The slot went back only when the ``authorized`` write failed; any other failure after admit
    (a metrics or tracing hook, the audit of the admit step) kept it for good."""
    audit, failed = Pipeline._audit, []

    def admit_audit_fails_once(self, c, stage, code, **kw):  # fault injected after the slot is taken
        if stage == "admit" and c.ctx.tool is not None and c.ctx.tool.name == "echo" and not failed:
            failed.append(c.ctx.decision_id)
            raise RuntimeError("metrics hook failed")
        return audit(self, c, stage, code, **kw)

    monkeypatch.setattr(Pipeline, "_audit", admit_audit_fails_once)
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        assert (await client.call("echo", '{"x": 1}')).code == "internal_error" and failed
        assert (await client.call("echo", '{"x": 2}')).code == "ok"  # the slot came back
    finally:
        await client.close()
        await running.stop()
