"""A Rust panic inside the embedded engine (regorus) on a string an agent sends denies that call
and no other. pyo3 raises a panic as ``PanicException``, a ``BaseException``: it went past every
``except Exception``, the call was audited ``cancelled`` with no policy step and got no answer,
and the engine, left mid-evaluation, failed every later call as "recursion detected" (every
tenant, until a reload). Strings regorus 0.13 panics on: ``time.parse_duration_ns("9é")``,
``strings.count(s, "")``."""

from __future__ import annotations

import json

import pytest

from gateway.testing import start_gateway
from policies import PolicyError
from policies.embedded import EmbeddedEngine
from policies.shadow import ShadowEngine
from tests.conftest import Client, audit_records, audit_steps, demo_config, policy_bundle

PANICS = "9\u00e9"  # a digit, then a character of two UTF-8 bytes

POLICY = """package toolgate
import rego.v1
visible := true
default decision := {"decision": "deny", "reasons": ["ttl over an hour"]}
decision := {"decision": "allow", "reasons": ["short ttl"]} if {
    not input.args.ttl
} else := {"decision": "allow", "reasons": ["short ttl"]} if {
    time.parse_duration_ns(input.args.ttl) <= time.parse_duration_ns("1h")
}
"""


def _engine(tmp_path) -> EmbeddedEngine:
    return EmbeddedEngine.from_bundle(policy_bundle(tmp_path / "bundle", POLICY))


def _input(ttl: str) -> dict:
    return {"args": {"ttl": ttl}}


@pytest.mark.parametrize("panicking", ["time.parse_duration_ns(input.args.ttl) > 0",
                                       'strings.count(input.args.ttl, "") > 0'])
async def test_a_panic_denies_that_evaluation_and_the_next_one_decides(tmp_path, panicking):
    rego = POLICY.replace("time.parse_duration_ns(input.args.ttl) <= time.parse_duration_ns(\"1h\")", panicking)
    engine = EmbeddedEngine.from_bundle(policy_bundle(tmp_path / "bundle", rego))
    with pytest.raises(PolicyError) as err:
        await engine.evaluate(_input(PANICS))
    assert err.value.code == "policy_unavailable" and "panicked" in err.value.detail
    for _ in range(3):  # the engine is whole again: each later evaluation decides
        assert (await engine.evaluate({"args": {}})).decision == "allow"
        with pytest.raises(PolicyError):
            await engine.evaluate(_input(PANICS))
    await engine.close()


async def test_a_panic_in_the_shadow_candidate_leaves_the_enforced_decision(tmp_path):
    enforced = EmbeddedEngine.from_bundle(policy_bundle(tmp_path / "enforced", POLICY.replace(
        "time.parse_duration_ns(input.args.ttl) <= time.parse_duration_ns(\"1h\")", "true")))
    shadow = ShadowEngine(enforced, _engine(tmp_path))
    decision = await shadow.evaluate(_input(PANICS))
    assert decision.decision == "allow"
    await shadow.close()


async def test_through_the_gateway_the_call_is_denied_audited_and_the_others_go_on(tmp_path):
    cfg = demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "bundle", POLICY))})
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        assert (await client.call("echo", json.dumps({"ttl": "30m"}))).code == "ok"
        panicked = await client.call("echo", json.dumps({"ttl": PANICS}))
        assert panicked.WhichOneof("outcome") == "refused" and panicked.refused.code == "policy_unavailable"
        for _ in range(3):
            assert (await client.call("echo", json.dumps({"ttl": "30m"}))).code == "ok"
            assert (await client.call("echo", "{}")).code == "ok"
    finally:
        await client.close()
        await running.stop()
    steps = [s for s in audit_steps(cfg.audit_path) if s["decision_id"] == panicked.decision_id]
    policy = [s for s in steps if s["stage"] == "policy"]
    assert policy and policy[0]["code"] == "policy_unavailable" and "panicked" in policy[0]["detail"], steps
    result = [r for r in audit_records(cfg.audit_path) if r["decision_id"] == panicked.decision_id][-1]
    assert result["code"] == "policy_unavailable" and result["executed"] is False


def test_a_panic_elsewhere_in_the_call_path_is_an_internal_error_not_a_cancel():
    from gateway.codes import Code
    from gateway.pipeline import _failed, _stops

    class PanicException(BaseException):  # as pyo3 makes it: a BaseException of its own
        pass

    assert not _stops(PanicException("boom"))

    class NotRun:
        executed = False

    assert _failed(NotRun(), PanicException("boom")).code == Code.INTERNAL_ERROR
