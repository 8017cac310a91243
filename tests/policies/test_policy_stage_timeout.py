"""The policy stage's time limit (``gateway.policy.decide``): every engine's decision is bounded.

The stage sets no timer of its own around an engine that bounds its own wait by no more than
the stage's limit (``wait_bound_ms``: the OPA engine). These hold it to that: an engine that
claims a longer bound, or one that is not a positive int, still gets the stage's timer; a hung
OPA denies within the engine's bound, both called alone and through the whole gateway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.policy import decide
from gateway.testing import start_gateway
from policies import OPAEngine, PolicyError
from tests.conftest import Client, audit_steps, demo_config
from tests.policies.policy_opa_server import REGO
from tests.policies.test_policy_opa_http import FakeOPA, hang

DOC: dict[str, Any] = {"n": 1}


class Hung:
    """An engine whose evaluation never finishes, claiming ``wait_bound_ms`` when given one."""

    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)
        self.cancelled = False

    async def evaluate(self, input: dict[str, Any]) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def refused_within(engine: Any, timeout_ms: int, limit_s: float) -> PolicyError:
    started = time.monotonic()
    with pytest.raises(PolicyError) as info:
        async with asyncio.timeout(5):  # a test that would hang fails instead (TimeoutError)
            await decide(engine, DOC, timeout_ms)
    assert time.monotonic() - started < limit_s
    assert info.value.code == "policy_unavailable"
    return info.value


async def test_an_engine_that_never_answers_is_cut_off_by_the_stage():
    engine = Hung()
    error = await refused_within(engine, 100, 2.0)
    assert "exceeded 100 ms" in error.detail and engine.cancelled


@pytest.mark.parametrize("bound", [60_000, 101, True, 100.0, "100", 0, -5, None])
async def test_a_bound_the_stage_cannot_rely_on_gets_the_stage_timer(bound):
    engine = Hung(wait_bound_ms=bound)  # longer than the stage's, or not a positive int
    error = await refused_within(engine, 100, 2.0)
    assert "exceeded 100 ms" in error.detail and engine.cancelled


async def test_an_inline_engine_is_not_wrapped():
    class Inline:
        inline = True

        async def evaluate(self, input: dict[str, Any]) -> Any:
            return asyncio.current_task()

    assert await decide(Inline(), DOC, 100) is asyncio.current_task()  # no task, no timer around it


@pytest.fixture
async def hung_opa() -> AsyncIterator[FakeOPA]:
    server = FakeOPA(*[hang] * 8)
    await server.start()
    yield server
    await server.stop()


async def test_a_hung_opa_denies_within_the_engines_own_bound(hung_opa):
    engine = OPAEngine(hung_opa.url, timeout_ms=150)
    try:
        assert engine.wait_bound_ms == 150
        error = await refused_within(engine, 150, 2.0)
        assert "150 ms" in error.detail  # the engine's own timer, the only one
        await hung_opa.wait_for_hangups(1)  # and the hung connection was dropped
    finally:
        await engine.close()


async def test_an_opa_bound_longer_than_the_stage_is_cut_off_by_the_stage(hung_opa):
    engine = OPAEngine(hung_opa.url, timeout_ms=30_000)
    try:
        error = await refused_within(engine, 150, 2.0)
        assert "exceeded 150 ms" in error.detail
        await hung_opa.wait_for_hangups(1)
    finally:
        await engine.close()


async def test_a_hung_opa_denies_the_gateways_call_within_the_bound_and_audits_it(hung_opa, tmp_path):
    cfg = demo_config(tmp_path, policy={"engine": "opa", "opa_url": hung_opa.url, "timeout_ms": 200,
                                        "bundle": str(REGO)})
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        started = time.monotonic()
        answer = await client.call("count_call", '{"n": 1}')
        assert time.monotonic() - started < 3
        assert answer.code == "policy_unavailable" and answer.WhichOneof("outcome") == "refused"
    finally:
        await client.close()
        await running.stop()
    policy = [r for r in audit_steps(cfg.audit_path) if r["stage"] == "policy"]
    assert [r["code"] for r in policy] == ["policy_unavailable"]
