"""OPAEngine against a real OPA server: decisions, decision ids, failing closed, recovery."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from policy_opa_server import REGO, OPAServer, free_port
from policies import UNDEFINED, OPAEngine, PolicyError
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
    engine.reload()
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
