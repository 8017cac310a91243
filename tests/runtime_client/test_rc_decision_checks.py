"""A decision may stop only with a reason a decision can own, and may call a tool only with
input that has a JSON form; anything else stops the run with ``invalid_decision`` (no
exception, nothing sent to the gateway). Tool input is checked against the real gateway
client, whose gRPC transport is where a non-JSON input used to raise."""

from __future__ import annotations

import pytest

from runtime_client import AgentState, Stop, StopReason, ToolCall, run_agent
from runtime_client.testing import scripted_decide

gateway_testing = pytest.importorskip("gateway.testing")

from tests.conftest import demo_config, real_gateway_client  # noqa: E402

RUNTIME_OWNED = ["success", "awaiting_approval", "budget_exhausted", "tool_failure", "invalid_decision"]
DECISION_OWNED = ["blocked", "refused", "cancelled"]


def _invalid_message(result) -> str:
    assert result.stop_reason is StopReason.INVALID_DECISION, result.state.observations
    [obs] = [o for o in result.state.observations if o.code == "invalid_decision"]
    return obs.summary


@pytest.mark.parametrize("as_dict", [False, True], ids=["Stop", "dict"])
@pytest.mark.parametrize("reason", RUNTIME_OWNED)
async def test_stop_with_a_reason_the_runtime_owns_is_an_invalid_decision(gateway, reason, as_dict):
    decision = {"type": "stop", "reason": reason} if as_dict else Stop(reason)
    result = await run_agent(AgentState(goal="x"), lambda s: decision, gateway, checkpoints=None)
    message = _invalid_message(result)
    assert f"stop reason {reason!r} is set by the runtime" in message
    assert result.state.answer is None and result.state.pending_approvals == []
    assert result.trace[-1].data["reason"] == "invalid_decision"


@pytest.mark.parametrize("reason", DECISION_OWNED)
async def test_stop_with_a_decision_reason_stops_with_it(gateway, reason):
    result = await run_agent(AgentState(goal="x"), lambda s: {"type": "stop", "reason": reason}, gateway,
                             checkpoints=None)
    assert result.stop_reason is StopReason(reason)


@pytest.fixture
async def real(tmp_path):
    async with real_gateway_client(demo_config(tmp_path)) as client:
        yield client


def _cycle() -> dict:
    loop: dict = {"a": 1}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize("bad_input, says", [
    ({"tags": {"a", "b"}}, "set"),
    ({"blob": b"\x00"}, "bytes"),
    ({"x": float("nan")}, "not JSON"),
    ({"x": [1, float("inf")]}, "not JSON"),
    ({"nested": {1: "one"}}, "key 1 is not a string"),
    ({"loop": _cycle()}, "not JSON"),
], ids=["set", "bytes", "nan", "inf", "int-key", "cycle"])
async def test_non_json_tool_input_is_an_invalid_decision(real, bad_input, says):
    decide = scripted_decide(ToolCall("echo", bad_input))
    result = await run_agent(AgentState(goal="x"), decide, real, checkpoints=None)
    message = _invalid_message(result)
    assert "input of tool 'echo' is not JSON" in message and says in message
    assert result.state.tools_called == []
    assert not [o for o in result.state.observations if o.kind == "tool"]
