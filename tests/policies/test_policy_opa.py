"""OPAEngine against a real OPA server (TCP and Unix socket): decisions, decision ids, failing
closed, recovery, concurrency."""

from __future__ import annotations

import asyncio
import gc
import subprocess

import pytest

from policy_opa_server import REGO, OPAServer, free_port
from policies import UNDEFINED, EmbeddedEngine, OPAEngine, PolicyError
from policies.testing import run_tests

pytestmark = pytest.mark.opa

WRITE = {
    "tool": {"name": "write_file", "version": "1", "risk": {"side_effect": "write"}, "labels": [], "constraints": {}},
    "args": {"path": "notes/a.md"},
    "run": {"id": "r", "step": 1, "evidence": {}},
}


async def test_opa_decides_and_returns_its_decision_id(opa_server):
    engine = OPAEngine(opa_server.url)
    try:
        decisions = await asyncio.gather(*(engine.evaluate(WRITE) for _ in range(20)))
    finally:
        await engine.close()
    assert {d.decision for d in decisions} == {"require_approval"}
    ids = [d.engine_decision_id for d in decisions]
    assert all(ids) and len(set(ids)) == len(ids)  # one id per evaluation, even concurrently


async def test_opa_query_returns_values_and_undefined(opa_server):
    engine = OPAEngine(opa_server.url)
    try:
        assert await engine.query("data.toolgate.visible", WRITE) is True
        assert await engine.query("data.toolgate.no_such_rule", WRITE) is UNDEFINED
    finally:
        await engine.close()


async def test_opa_undefined_decision_is_invalid(opa_server):
    engine = OPAEngine(opa_server.url, query="data.toolgate.no_such_rule")
    try:
        with pytest.raises(PolicyError) as info:
            await engine.evaluate(WRITE)
        assert info.value.code == "policy_invalid_decision"
    finally:
        await engine.close()


async def test_opa_non_decision_value_is_invalid(opa_server):
    engine = OPAEngine(opa_server.url, query="data.toolgate.side_effect")
    try:
        with pytest.raises(PolicyError) as info:
            await engine.evaluate(WRITE)
        assert info.value.code == "policy_invalid_decision"
    finally:
        await engine.close()


async def test_unreachable_opa_is_policy_unavailable():
    engine = OPAEngine(f"http://127.0.0.1:{free_port()}", timeout_ms=200)
    try:
        with pytest.raises(PolicyError) as info:
            await engine.evaluate(WRITE)
        assert info.value.code == "policy_unavailable"
    finally:
        await engine.close()


def test_opa_reload_versions_the_loaded_policies(opa_server):
    engine = OPAEngine(opa_server.url)
    assert engine.version == f"opa:{opa_server.url}"
    asyncio.run(engine.reload())
    assert engine.version.startswith("opa:sha256:")


async def test_opa_stopped_mid_test_denies_then_recovers_on_the_same_engine(opa_binary, tmp_path):
    server = OPAServer(opa_binary, REGO, tmp_path)
    server.start()
    engine = OPAEngine(server.url, timeout_ms=300)
    try:
        assert (await engine.evaluate(WRITE)).decision == "require_approval"
        server.stop()
        with pytest.raises(PolicyError) as info:
            await engine.evaluate(WRITE)
        assert info.value.code == "policy_unavailable"
        server.start()
        assert (await engine.evaluate(WRITE)).decision == "require_approval"
    finally:
        await engine.close()
        server.stop()


def test_opa_test_passes_on_the_default_bundle(opa_binary):
    proc = subprocess.run([str(opa_binary), "test", str(REGO)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("PASS: ")


def test_both_test_runners_see_the_same_tests(opa_binary, monkeypatch):
    monkeypatch.setenv("TOOLGATE_OPA", str(opa_binary))
    embedded = {(r.package, r.name, r.passed) for r in run_tests(REGO)}
    opa = {(r.package, r.name, r.passed) for r in run_tests(REGO, engine="opa")}
    assert embedded == opa
    assert all(passed for _, _, passed in embedded)


def policy_input(name: str, side_effect: str, args: dict) -> dict:
    return {
        "caller": {"tenant": "acme", "agent": "bot", "user": "alice"},
        "tool": {"name": name, "version": "1", "labels": [], "constraints": {},
                 "risk": {"side_effect": side_effect, "reversibility": "reversible", "data_sensitivity": "internal"}},
        "args": args,
        "args_hash": "sha256:00",
        "run": {"id": "r", "step": 1, "evidence": {}},
        "environment": {"gateway_id": "toolgate", "time": "2025-01-01T00:00:00Z"},
    }


MIXED = [
    policy_input("read_file", "read", {"path": "docs/a.md"}),  # allow
    policy_input("write_file", "write", {"path": "notes/a.md", "content": "x"}),  # require_approval
    policy_input("delete_file", "destructive", {"path": "notes/a.md"}),  # deny
    policy_input("refund", "external_write", {"amount": 5000, "order_id": "o", "currency": "EUR"}),  # require_more_evidence
]


async def test_64_concurrent_decisions_each_get_their_own_answer(opa_server):
    docs = [MIXED[i % len(MIXED)] for i in range(64)]
    expected = [EmbeddedEngine.from_bundle(REGO).evaluate_sync(doc).model_dump() for doc in docs]
    engine = OPAEngine(opa_server.url, timeout_ms=5000)
    try:
        for _ in range(2):  # the second wave runs on the pooled connections of the first
            decisions = await asyncio.gather(*(engine.evaluate(doc) for doc in docs))
            assert [d.model_dump() for d in decisions] == expected
            assert {d.decision for d in decisions} == {"allow", "require_approval", "deny", "require_more_evidence"}
            assert len({d.engine_decision_id for d in decisions}) == 64
    finally:
        await engine.close()


async def test_opa_restarted_between_calls_the_next_call_is_answered(opa_binary, tmp_path):
    """Pooled connections to the old process are dead: each is dropped or retried once, not denied."""
    server = OPAServer(opa_binary, REGO, tmp_path)
    server.start()
    engine = OPAEngine(server.url, timeout_ms=2000)
    try:
        assert {d.decision for d in await asyncio.gather(*(engine.evaluate(WRITE) for _ in range(64)))} == {"require_approval"}
        server.stop()
        server.start()
        assert {d.decision for d in await asyncio.gather(*(engine.evaluate(WRITE) for _ in range(64)))} == {"require_approval"}
    finally:
        await engine.close()
        server.stop()


@pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")
def test_one_engine_serves_successive_event_loops(opa_server):
    engine = OPAEngine(opa_server.url)

    async def decide() -> str:
        return (await engine.evaluate(WRITE)).decision

    async def decide_and_close() -> str:
        try:
            return await decide()
        finally:
            await engine.close()

    assert asyncio.run(decide()) == "require_approval"
    assert asyncio.run(decide_and_close()) == "require_approval"  # the first loop's connection is not reused
    gc.collect()  # which the GC closes (its loop is gone): the expected warning is raised here, not later


async def test_opa_on_a_unix_socket_decides_and_versions(unix_opa):
    engine = OPAEngine(unix_opa.url)
    try:
        decision = await engine.evaluate(WRITE)
        assert decision.decision == "require_approval" and decision.engine_decision_id is None  # no decision log
        await engine.reload()
        assert engine.version.startswith("opa:sha256:")
    finally:
        await engine.close()


async def test_64_concurrent_queries_on_a_unix_socket_each_get_their_own_value(unix_opa):
    engine = OPAEngine(unix_opa.url, timeout_ms=5000)
    try:
        for _ in range(2):
            assert await asyncio.gather(*(engine.query("data.echo.n", {"n": n}) for n in range(64))) == list(range(64))
    finally:
        await engine.close()


async def test_opa_on_a_unix_socket_stopped_denies_then_recovers(unix_opa):
    engine = OPAEngine(unix_opa.url, timeout_ms=500)
    try:
        assert await asyncio.gather(*(engine.query("data.echo.n", {"n": n}) for n in range(16))) == list(range(16))
        unix_opa.stop()
        down = await asyncio.gather(*(engine.evaluate(WRITE) for _ in range(16)), return_exceptions=True)
        assert {error.code for error in down if isinstance(error, PolicyError)} == {"policy_unavailable"}
        assert all(isinstance(error, PolicyError) for error in down)
        unix_opa.start()
        assert await asyncio.gather(*(engine.query("data.echo.n", {"n": n}) for n in range(16))) == list(range(16))
    finally:
        await engine.close()
