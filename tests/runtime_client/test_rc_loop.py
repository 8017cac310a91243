"""The loop contract, driven by deterministic decide functions against the FakeGateway."""

from __future__ import annotations

import pytest

from runtime_client import (
    AgentState, Answer, AskHuman, Stop, StopReason, ToolCall, TrajectoryEval, replay, run_agent,
)
from runtime_client.testing import scripted_decide


async def test_immediate_answer_succeeds_in_one_step(gateway, checkpoints):
    result = await run_agent(AgentState(goal="say hi"), lambda s: Answer("hi"), gateway,
                             checkpoints=checkpoints)
    assert result.stop_reason is StopReason.SUCCESS
    assert result.state.steps == 1
    assert result.state.answer == "hi"
    assert [o.kind for o in result.state.observations] == ["decision"]


async def test_always_tool_stops_budget_exhausted_at_exactly_max_steps(fake, gateway):
    decide = lambda s: ToolCall("lookup_policy", {"topic": "refunds"})
    result = await run_agent(AgentState(goal="loop", max_steps=4), decide, gateway, checkpoints=None)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert result.state.steps == 4
    assert len(fake.executions("lookup_policy")) == 4
    assert result.trace[-1].type == "stop" and result.trace[-1].data["reason"] == "budget_exhausted"


async def test_model_cannot_extend_its_own_budget(fake, gateway):
    def greedy(state: AgentState):
        state.max_steps = 1000  # a copy: the runtime owns the budget
        state.steps = 0
        return ToolCall("lookup_policy", {"topic": "refunds"})

    result = await run_agent(AgentState(goal="loop", max_steps=3), greedy, gateway, checkpoints=None)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert result.state.steps == 3 and result.state.max_steps == 3
    assert len(fake.executions()) == 3


async def test_unknown_tool_is_refused_and_nothing_executes(fake, gateway):
    result = await run_agent(AgentState(goal="x"), lambda s: ToolCall("format_disk", {}), gateway,
                             checkpoints=None)
    assert result.stop_reason is StopReason.REFUSED
    assert fake.executions() == []
    assert result.state.observations[-1].code == "unknown_tool"
    assert result.state.tools_called == []


async def test_policy_denied_destructive_call_is_refused(fake, gateway):
    result = await run_agent(AgentState(goal="x"), lambda s: ToolCall("delete_file", {"path": "a"}),
                             gateway, checkpoints=None)
    assert result.stop_reason is StopReason.REFUSED
    assert result.state.observations[-1].code == "policy_denied"
    assert fake.executions() == []


async def test_ask_human_blocks(gateway):
    result = await run_agent(AgentState(goal="x"), lambda s: AskHuman("which file?"), gateway,
                             checkpoints=None)
    assert result.stop_reason is StopReason.BLOCKED
    assert result.state.messages[-1].content == "which file?"


async def test_stop_decision_uses_its_reason(gateway):
    result = await run_agent(AgentState(goal="x"), lambda s: Stop("cancelled"), gateway, checkpoints=None)
    assert result.stop_reason is StopReason.CANCELLED


@pytest.mark.parametrize("bad", [
    None, "answer", 42, {"type": "answer"}, {"type": "teleport"}, {"type": "answer", "text": "x", "y": 1},
    ToolCall("", {}), ToolCall("read_file", "path=a"), Stop("because"), [], [Answer("x")],
])
async def test_malformed_decision_stops_invalid_decision(fake, gateway, bad):
    result = await run_agent(AgentState(goal="x"), lambda s: bad, gateway, checkpoints=None)
    assert result.stop_reason is StopReason.INVALID_DECISION
    assert fake.executions() == []


async def test_dict_decisions_are_accepted_in_one_strict_shape(gateway):
    decide = scripted_decide({"type": "tool", "name": "lookup_policy", "input": {"topic": "refunds"}},
                             {"type": "answer", "text": "done"})
    result = await run_agent(AgentState(goal="x"), decide, gateway, checkpoints=None)
    assert result.stop_reason is StopReason.SUCCESS
    assert result.state.tools_called == ["lookup_policy"]


async def test_policy_read_trajectory(fake, gateway, checkpoints):
    decide = scripted_decide(ToolCall("lookup_policy", {"topic": "refunds"}), Answer("Refunds >500 need a manager."))
    result = await run_agent(AgentState(goal="What is the refund policy?"), decide, gateway,
                             checkpoints=checkpoints)
    state = result.state
    assert state.stop_reason is StopReason.SUCCESS
    assert state.steps == 2
    assert state.tools_called == ["lookup_policy"]
    assert [e.type for e in result.trace] == [
        "context_built", "decision", "policy_decision", "tool_result",
        "context_built", "decision", "stop"]
    assert {e.type for e in result.trace} == {"context_built", "decision", "policy_decision", "tool_result", "stop"}
    assert all(e.run_id == state.run_id and e.ended_at >= e.started_at > 0 for e in result.trace)
    assert [e.step for e in result.trace] == [1, 1, 1, 1, 2, 2, 2]
    spec = TrajectoryEval(required_tools=("lookup_policy",), forbidden_tools=("write_file", "delete_file"),
                          expected_stop_reason="success", max_steps=2)
    assert spec.evaluate(state).passed, spec.evaluate(state).failures
    tool_obs = [o for o in state.observations if o.kind == "tool"]
    assert tool_obs[0].trust == "untrusted" and tool_obs[0].data["topic"] == "refunds"


async def test_answer_that_looks_fine_fails_eval_after_forbidden_write(fake, gateway):
    fake.add_tool("append_note", lambda text: {"ok": True}, side_effect="write")
    decide = scripted_decide(ToolCall("append_note", {"text": "x"}), Answer("All good, nothing changed."))
    result = await run_agent(AgentState(goal="summarise"), decide, gateway, checkpoints=None)
    assert result.stop_reason is StopReason.SUCCESS
    verdict = TrajectoryEval(forbidden_tools=("append_note",), expected_stop_reason="success").evaluate(result.state)
    assert not verdict.passed
    assert verdict.failures == ("forbidden tool 'append_note' was called",)


async def test_eval_reports_missing_tool_wrong_stop_and_too_many_steps(gateway):
    decide = scripted_decide(ToolCall("lookup_policy", {"topic": "refunds"}), Answer("x"))
    result = await run_agent(AgentState(goal="x"), decide, gateway, checkpoints=None)
    verdict = TrajectoryEval(required_tools=("read_file",), expected_stop_reason="refused",
                             max_steps=1).evaluate(result.state)
    assert len(verdict.failures) == 3 and not verdict.passed


async def test_tool_error_stops_tool_failure(fake, gateway):
    def boom(**_):
        raise RuntimeError("disk on fire")

    fake.add_tool("flaky", boom)
    result = await run_agent(AgentState(goal="x"), lambda s: ToolCall("flaky", {}), gateway, checkpoints=None)
    assert result.stop_reason is StopReason.TOOL_FAILURE
    assert result.state.observations[-1].status == "error"


async def test_gateway_down_during_call_stops_tool_failure(fake, gateway):
    await gateway.list_tools()
    fake.unavailable = True
    result = await run_agent(AgentState(goal="x"), lambda s: ToolCall("read_file", {"path": "a"}),
                             gateway, checkpoints=None)
    assert result.stop_reason is StopReason.TOOL_FAILURE
    assert result.state.observations[-1].code == "transport_error"


async def test_event_log_replays_to_the_final_state(gateway, checkpoints):
    decide = scripted_decide(ToolCall("lookup_policy", {"topic": "refunds"}),
                             ToolCall("read_file", {"path": "a"}), Answer("done"))
    result = await run_agent(AgentState(goal="x", metadata={"k": [1]}), decide, gateway,
                             checkpoints=checkpoints)
    assert replay(result.events) == result.state
    assert replay(result.events).model_dump() == AgentState.from_json(result.state.to_json()).model_dump()
    stored, events = checkpoints.load(result.state.run_id)
    assert stored == result.state and replay(events) == stored


async def test_rejects_already_stopped_state(gateway):
    with pytest.raises(ValueError):
        await run_agent(AgentState(goal="x", stop_reason="success"), lambda s: Answer("x"), gateway)
