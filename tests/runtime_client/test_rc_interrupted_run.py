"""A run an exception stopped (the model's API failing, the gateway down when it began) is
checkpointed with no stop reason, and ``run_agent`` refuses its id: ``resume`` goes on with it.
Before, ``resume`` returned such a run as it was, so it could be neither run nor resumed."""

from __future__ import annotations

import pytest

from runtime_client import AgentState, Answer, ToolCall, resume, run_agent
from runtime_client.testing import FakeGateway


def _flaky_decide(fail_at: int):
    """A write, then an answer; the ``fail_at``-th decision raises as a model API outage does."""
    asked, decided = 0, 0

    def decide(state):
        nonlocal asked, decided
        asked += 1
        if asked == fail_at:
            raise ConnectionError("model API 503")
        decided += 1
        return ToolCall("write", {"x": 1}) if decided == 1 else Answer("done")

    return decide


def _fake() -> FakeGateway:
    fake = FakeGateway()
    fake.add_tool("write", side_effect="write")
    return fake


async def _interrupted(run_id: str, fail_at: int, checkpoints) -> tuple[FakeGateway, object]:
    """A run of ``_flaky_decide(fail_at)`` that the model's failure stopped: (the gateway, decide)."""
    fake, decide = _fake(), _flaky_decide(fail_at)
    with pytest.raises(ConnectionError):
        await run_agent(AgentState(goal="g", run_id=run_id), decide, fake.async_client(), checkpoints=checkpoints)
    return fake, decide


async def test_a_run_the_model_failed_is_resumed_to_its_end_and_its_write_runs_once(checkpoints):
    fake, decide = await _interrupted("r1", 2, checkpoints)
    with pytest.raises(ValueError, match="resume\\(\\) it"):
        await run_agent(AgentState(goal="g", run_id="r1"), decide, fake.async_client(), checkpoints=checkpoints)
    result = await resume("r1", decide, fake.async_client(), checkpoints=checkpoints)
    assert result.stop_reason.value == "success" and result.state.answer == "done"
    assert len(fake.executions("write")) == 1


async def test_a_run_that_failed_before_its_first_step_is_resumed(checkpoints):
    fake, decide = await _interrupted("r2", 1, checkpoints)
    result = await resume("r2", decide, fake.async_client(), checkpoints=checkpoints)
    assert result.stop_reason.value == "success"
    assert len(fake.executions("write")) == 1


async def test_a_stopped_run_is_still_returned_as_it_was(checkpoints):
    fake = _fake()
    first = await run_agent(AgentState(goal="g", run_id="r3"), _flaky_decide(fail_at=0), fake.async_client(),
                            checkpoints=checkpoints)
    again = await resume("r3", _flaky_decide(fail_at=1), fake.async_client(), checkpoints=checkpoints)
    assert again.stop_reason == first.stop_reason and len(fake.executions("write")) == 1
