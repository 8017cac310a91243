"""The default bundle through build_engine, on the demo tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings

from gateway.config import Config
from policies import EmbeddedEngine, OPAEngine, PolicyEngine, ShadowEngine, build_engine
from test_policy_parity import policy_inputs  # the generated corpus the engines are compared on

REPO = Path(__file__).resolve().parents[2]


def policy_input(name: str, side_effect: str, args: dict, **extra) -> dict:
    doc = {
        "caller": {"tenant": "acme", "agent": "bot", "user": "alice"},
        "tool": {
            "name": name,
            "version": "1",
            "risk": {"side_effect": side_effect, "reversibility": "reversible", "data_sensitivity": "internal"},
            "labels": [],
            "constraints": {},
        },
        "args": args,
        "args_hash": "sha256:00",
        "run": {"id": "r", "step": 1, "evidence": {}},
        "environment": {"gateway_id": "toolgate", "time": "2025-01-01T00:00:00Z"},
    }
    doc.update(extra)
    return doc


@pytest.fixture
def engine() -> EmbeddedEngine:
    built = build_engine(Config(base_dir=str(REPO)))
    assert isinstance(built, EmbeddedEngine) and isinstance(built, PolicyEngine)
    return built


@pytest.mark.parametrize(
    "name, side_effect, args, expected, audit",
    [
        ("read_file", "read", {"path": "docs/a.md"}, "allow", "minimal"),
        ("list_dir", "read", {"path": "."}, "allow", "minimal"),
        ("lookup_policy", "read", {"topic": "refunds"}, "allow", "minimal"),
        ("run_command", "read", {"command": "uptime"}, "allow", "minimal"),
        ("http_get", "read", {"url": "https://example.com"}, "allow", "minimal"),
        ("read_file", "read", {"path": "secrets/api.txt"}, "require_approval", "minimal"),
        ("write_file", "write", {"path": "notes/a.md", "content": "x"}, "require_approval", "full"),
        ("delete_file", "destructive", {"path": "notes/a.md"}, "deny", "full"),
        ("refund", "external_write", {"amount": 20, "order_id": "o", "currency": "EUR"}, "allow", "full"),
        ("refund", "external_write", {"amount": 500, "order_id": "o", "currency": "EUR"}, "require_approval", "full"),
        ("refund", "external_write", {"amount": 5000, "order_id": "o", "currency": "EUR"}, "require_more_evidence", "full"),
        ("refund", "external_write", {"amount": 50000, "order_id": "o", "currency": "EUR"}, "deny", "full"),
    ],
)
async def test_demo_tools(engine, name, side_effect, args, expected, audit):
    decision = await engine.evaluate(policy_input(name, side_effect, args))
    assert (decision.decision, decision.audit) == (expected, audit)
    assert decision.reasons


async def test_verified_approval_allows_the_write(engine):
    doc = policy_input("write_file", "write", {"path": "a"}, approval={"approvers": ["bob"], "groups": ["ops"]})
    assert (await engine.evaluate(doc)).decision == "allow"


async def test_hidden_tools_are_not_visible(engine):
    doc = policy_input("debug", "read", {})
    assert await engine.query("data.toolgate.visible", doc) is True
    doc["tool"]["labels"] = ["hidden"]
    assert await engine.query("data.toolgate.visible", doc) is False


async def test_build_engine_opa():
    engine = build_engine(Config(base_dir=str(REPO), policy={"engine": "opa", "opa_url": "http://127.0.0.1:1/"}))
    assert isinstance(engine, OPAEngine)
    await engine.close()


async def test_build_engine_with_shadow_bundle():
    engine = build_engine(Config(base_dir=str(REPO), policy={"shadow_bundle": "rego"}))
    assert isinstance(engine, ShadowEngine)
    assert isinstance(engine.enforced, EmbeddedEngine) and isinstance(engine.candidate, EmbeddedEngine)


_fast_path_engine = EmbeddedEngine.from_bundle(REPO / "rego")


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(doc=policy_inputs())
async def test_the_read_fast_path_never_changes_a_decision(doc):
    """``decision`` short-cuts plain reads; on any input it must equal ``full_decision``, the
    complete precedence chain. A rule added to the bundle that applies to reads without
    being reflected in the fast path's conditions fails this test."""
    assert await _fast_path_engine.query("data.toolgate.decision", doc) == await _fast_path_engine.query(
        "data.toolgate.full_decision", doc
    )


_EXTRA_DENY = """package toolgate

import rego.v1

deny contains "lookups are closed for maintenance" if input.tool.name == "lookup_policy"
"""


def _bundle_with_extra_deny(folder: Path) -> Path:
    folder.mkdir()
    (folder / "decision.rego").write_text((REPO / "rego" / "toolgate" / "decision.rego").read_text())
    (folder / "maintenance.rego").write_text(_EXTRA_DENY)
    return folder


async def test_a_deny_rule_in_another_file_applies_to_a_plain_read(tmp_path):
    """The fast path evaluates the whole deny set, not only the rules in decision.rego."""
    engine = EmbeddedEngine.from_bundle(_bundle_with_extra_deny(tmp_path / "bundle"))
    decision = await engine.evaluate(policy_input("lookup_policy", "read", {"topic": "refunds"}))
    assert (decision.decision, decision.reasons) == ("deny", ["lookups are closed for maintenance"])
    assert (await engine.evaluate(policy_input("read_file", "read", {"path": "docs/a.md"}))).decision == "allow"


@pytest.mark.opa
async def test_a_deny_rule_in_another_file_applies_to_a_plain_read_on_opa(opa_binary, tmp_path):
    from policy_opa_server import OPAServer

    server = OPAServer(opa_binary, _bundle_with_extra_deny(tmp_path / "bundle"), tmp_path)
    server.start()
    engine = OPAEngine(server.url)
    try:
        decision = await engine.evaluate(policy_input("lookup_policy", "read", {"topic": "refunds"}))
        assert (decision.decision, decision.reasons) == ("deny", ["lookups are closed for maintenance"])
        assert (await engine.evaluate(policy_input("read_file", "read", {"path": "docs/a.md"}))).decision == "allow"
    finally:
        await engine.close()
        server.stop()
