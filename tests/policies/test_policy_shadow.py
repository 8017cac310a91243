"""ShadowEngine: the enforced decision always wins; differences are logged and counted."""

from __future__ import annotations

import asyncio

from pathlib import Path

import pytest
import structlog

from policies import EmbeddedEngine, PolicyError, ShadowEngine

ALLOW = 'package toolgate\nimport rego.v1\ndecision := {"decision": "allow"}\n'
DENY = 'package toolgate\nimport rego.v1\ndecision := {"decision": "deny", "reasons": ["candidate"]}\n'
BROKEN = 'package toolgate\nimport rego.v1\ndecision := {"decision": "allow"} if { 1 / input.n > 0 }\n'


def engine(tmp_path: Path, name: str, text: str) -> EmbeddedEngine:
    (tmp_path / name).mkdir()
    (tmp_path / name / "p.rego").write_text(text)
    return EmbeddedEngine.from_bundle(tmp_path / name)


async def test_same_decisions_are_not_differences(tmp_path):
    shadow = ShadowEngine(engine(tmp_path, "a", ALLOW), engine(tmp_path, "b", ALLOW))
    assert (await shadow.evaluate({})).decision == "allow"
    assert (shadow.differences, shadow.evaluations) == (0, 1)


async def test_a_different_candidate_is_logged_and_counted_but_not_enforced(tmp_path):
    shadow = ShadowEngine(engine(tmp_path, "a", ALLOW), engine(tmp_path, "b", DENY))
    with structlog.testing.capture_logs() as logs:
        decision = await shadow.evaluate({"tool": {"name": "refund"}, "args_hash": "sha256:ab"})
    assert decision.decision == "allow"
    assert shadow.differences == 1
    (event,) = [e for e in logs if e["event"] == "policy_shadow_difference"]
    assert event["tool"] == "refund" and event["args_hash"] == "sha256:ab"
    assert event["enforced"]["decision"]["decision"] == "allow"
    assert event["candidate"]["decision"]["decision"] == "deny"


async def test_a_failing_candidate_never_affects_the_enforced_result(tmp_path):
    shadow = ShadowEngine(engine(tmp_path, "a", ALLOW), engine(tmp_path, "b", BROKEN))
    with structlog.testing.capture_logs() as logs:
        assert (await shadow.evaluate({"n": 0})).decision == "allow"
    assert shadow.differences == 1
    assert logs[0]["candidate"]["error"] == "policy_unavailable"


async def test_an_enforced_error_still_denies(tmp_path):
    shadow = ShadowEngine(engine(tmp_path, "a", BROKEN), engine(tmp_path, "b", ALLOW))
    with pytest.raises(PolicyError) as info:
        await shadow.evaluate({"n": 0})
    assert info.value.code == "policy_unavailable"
    assert shadow.differences == 1


async def test_candidate_bug_of_any_kind_is_contained(tmp_path):
    class Exploding:
        version = "x"

        async def evaluate(self, input):
            raise RuntimeError("candidate bug")

    shadow = ShadowEngine(engine(tmp_path, "a", ALLOW), Exploding())  # type: ignore[arg-type]
    assert (await shadow.evaluate({})).decision == "allow"
    assert shadow.differences == 1


def test_version_and_reload_follow_the_enforced_engine(tmp_path):
    enforced, candidate = engine(tmp_path, "a", ALLOW), engine(tmp_path, "b", ALLOW)
    shadow = ShadowEngine(enforced, candidate)
    assert shadow.version == enforced.version
    (tmp_path / "b" / "p.rego").write_text("package toolgate\nx := \n")
    asyncio.run(shadow.reload())  # a broken candidate is logged, not raised
    (tmp_path / "a" / "p.rego").write_text("package toolgate\nx := \n")
    with pytest.raises(Exception):
        asyncio.run(shadow.reload())
