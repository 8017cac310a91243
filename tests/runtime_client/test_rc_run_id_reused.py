"""A run whose id is in the checkpoint store already is refused: its calls' idempotency keys
(run id, step, index) would be the first run's, so the gateway answered them with that run's
stored outcomes (``replayed``) and the second run went on as if its calls had run."""

from __future__ import annotations

import pytest

from runtime_client import AgentState, Answer, ToolCall, resume, run_agent
from runtime_client.testing import FakeGateway, scripted_decide


async def test_a_second_run_with_the_same_id_is_refused(checkpoints):
    fake = FakeGateway()
    fake.add_tool("lookup", side_effect="read")
    first = await run_agent(AgentState(goal="g", run_id="run-1"),
                            scripted_decide(ToolCall("lookup", {"q": 1}), Answer("a")),
                            fake.async_client(), checkpoints=checkpoints)
    assert first.stop_reason.value == "success"
    with pytest.raises(ValueError, match="run run-1 is in the checkpoint store already"):
        await run_agent(AgentState(goal="g", run_id="run-1"), scripted_decide(ToolCall("lookup", {"q": 2})),
                        fake.async_client(), checkpoints=checkpoints)
    assert [c.args for c in fake.executions("lookup")] == [{"q": 1}]
    assert (await resume("run-1", scripted_decide(Answer("b")), fake.async_client(),
                         checkpoints=checkpoints)).stop_reason.value == "success"  # the first run, as it was
    other = await run_agent(AgentState(goal="g", run_id="run-2"), scripted_decide(Answer("c")),
                            fake.async_client(), checkpoints=checkpoints)
    assert other.stop_reason.value == "success"
