"""Parity: the embedded engine and a real OPA server decide a generated corpus identically."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy_opa_server import REGO
from policies import EmbeddedEngine, OPAEngine, PolicyError

pytestmark = [pytest.mark.opa, pytest.mark.slow]

CORPUS_SIZE = 600
TOOLS = [
    ("read_file", "read"),
    ("list_dir", "read"),
    ("lookup_policy", "read"),
    ("run_command", "read"),
    ("http_get", "read"),
    ("write_file", "write"),
    ("delete_file", "destructive"),
    ("refund", "external_write"),
    ("clock", "none"),
    ("post_message", "external_write"),
]
SIDE_EFFECTS = ["none", "read", "write", "external_write", "destructive", "teleport"]
BOUNDARIES = [0, 100, 100.01, 1000, 1000.5, 10000, 10000.01, -1, 1e9]
PATHS = ["docs/a.md", "secrets/db.txt", "./secrets/x", "a/../secrets/x", "home/.ssh/id_rsa", "app/.env", "notes/ssh.txt"]

amounts = st.one_of(
    st.sampled_from(BOUNDARIES),
    st.integers(min_value=-50, max_value=20000),
    st.floats(min_value=-50, max_value=20000, allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.none(),
)
paths = st.one_of(st.sampled_from(PATHS), st.text(alphabet="abs/.enrtch_", max_size=20), st.integers())


@st.composite
def policy_inputs(draw: st.DrawFn) -> dict[str, Any]:
    name, side_effect = draw(st.sampled_from(TOOLS))
    if draw(st.booleans()):
        side_effect = draw(st.sampled_from(SIDE_EFFECTS))
    args: dict[str, Any] = {}
    if draw(st.booleans()):
        args["path"] = draw(paths)
    if name == "refund" or draw(st.integers(0, 9)) == 0:
        if draw(st.integers(0, 9)):
            args["amount"] = draw(amounts)
        args.update(order_id="o-1", currency="EUR")
    evidence = draw(st.fixed_dictionaries({}, optional={"ticket_id": st.sampled_from(["T-1", "", None, 42])}))
    doc: dict[str, Any] = {
        "caller": {"tenant": "acme", "agent": "bot", "user": "alice"},
        "tool": {
            "name": name,
            "version": "1",
            "risk": {"side_effect": side_effect, "reversibility": "reversible", "data_sensitivity": "internal"},
            "labels": draw(st.lists(st.sampled_from(["hidden", "demo"]), max_size=2)),
            "constraints": draw(st.sampled_from([{}, {"hosts": ["example.com"]}])),
        },
        "args": args,
        "args_hash": "sha256:00",
        "run": {"id": "r", "step": draw(st.integers(0, 5)), "evidence": evidence},
        "environment": {"gateway_id": "toolgate", "time": "2025-01-01T00:00:00Z"},
    }
    if draw(st.booleans()):
        doc["approval"] = {
            "approvers": draw(st.lists(st.sampled_from(["bob", "carol", "dave", ""]), max_size=3)),
            "groups": draw(st.lists(st.sampled_from(["ops", "finance", "security", "sales"]), max_size=3)),
        }
    return doc


async def outcome(engine: Any, doc: dict[str, Any]) -> Any:
    try:
        return (await engine.evaluate(doc)).model_dump()
    except PolicyError as exc:
        return ("error", exc.code)


@functools.cache
def embedded_engine() -> EmbeddedEngine:
    return EmbeddedEngine.from_bundle(REGO)


_opa: dict[tuple[asyncio.AbstractEventLoop, str], OPAEngine] = {}


def opa_engine(url: str) -> OPAEngine:
    """One OPAEngine per event loop (an httpx client belongs to the loop it first ran on)."""
    key = (asyncio.get_running_loop(), url)  # holding the loop keeps its id from being reused
    if key not in _opa:
        _opa[key] = OPAEngine(url, timeout_ms=2000)
    return _opa[key]


compared: list[str] = []
"""The decision kind (or "error") of every input compared, for the corpus check below."""


@settings(max_examples=CORPUS_SIZE, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=policy_inputs())
async def test_embedded_and_opa_decide_the_corpus_identically(opa_server, doc):
    embedded, opa = embedded_engine(), opa_engine(opa_server.url)
    ours = await outcome(embedded, doc)
    assert ours == await outcome(opa, doc)
    assert await embedded.query("data.toolgate.visible", doc) == await opa.query("data.toolgate.visible", doc)
    compared.append(ours["decision"] if isinstance(ours, dict) else "error")


def test_the_corpus_was_large_and_varied(opa_server):
    """Runs after the parity test (same module, file order): >= 500 inputs, every decision kind."""
    assert len(compared) >= 500
    assert set(compared) >= {"allow", "deny", "require_approval", "require_more_evidence"}
