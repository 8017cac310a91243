"""One decision makes at most ``max_calls_per_step`` tool calls, and a read-only batch runs at
most ``MAX_PARALLEL_CALLS`` at once: a decision of hundreds of calls ran every one in a single
step (``max_steps`` bounded steps, not calls), the read-only ones all in flight together."""

from __future__ import annotations

import asyncio

from runtime_client import AgentState, Answer, ToolCall, ToolCalls, run_agent
from runtime_client._tool_execution import MAX_PARALLEL_CALLS
from runtime_client.testing import FakeGateway

MADE = 200


async def test_a_decision_past_the_limit_runs_only_the_limit_and_tells_the_model():
    fake, in_flight, most = FakeGateway(), 0, 0

    async def lookup(**args):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return args

    fake.add_tool("lookup", lookup, side_effect="read")
    decisions = iter([ToolCalls(tuple(ToolCall("lookup", {"n": i}) for i in range(MADE))), Answer("done")])
    state = AgentState(goal="look up", max_steps=3, max_calls_per_step=20)
    result = await run_agent(state, lambda s: next(decisions), fake.async_client(), checkpoints=None)
    assert result.stop_reason.value == "success"
    assert [c.args["n"] for c in fake.executions("lookup")] == list(range(20))
    assert most == MAX_PARALLEL_CALLS
    skipped = [o for o in result.state.observations if o.code == "not_run"]
    assert [o.data["input"]["n"] for o in skipped] == list(range(20, MADE))
    assert all(o.data["reason"] == "max_calls_per_step" and "at most 20 tool calls" in o.summary for o in skipped)


async def test_the_default_limit_is_sixteen():
    fake = FakeGateway()
    fake.add_tool("lookup", side_effect="read")
    decisions = iter([ToolCalls(tuple(ToolCall("lookup", {"n": i}) for i in range(MADE))), Answer("done")])
    result = await run_agent(AgentState(goal="g"), lambda s: next(decisions), fake.async_client(), checkpoints=None)
    assert len(fake.executions("lookup")) == 16 == AgentState(goal="g").max_calls_per_step
    assert result.stop_reason.value == "success"
