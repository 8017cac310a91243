"""One parallel batch, several outcomes: the stop reason follows a fixed precedence, never the
order the calls were written or answered in, and a run that stops for good keeps no approval
that a later resume could redeem."""

from __future__ import annotations

import asyncio

import pytest

from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, StopReason, ToolCall, ToolCalls, replay, resume, run_agent,
)
from runtime_client.testing import AsyncFakeTransport, FakeGateway, scripted_decide

NEEDS_APPROVAL = ToolCall("read_secret", {"name": "db"})
PARTNERS = {  # a read in the same batch whose outcome ends the run: (call, stop, its code)
    "denied": (ToolCall("read_shadow", {"path": "/etc/shadow"}), StopReason.REFUSED, "policy_denied"),
    "evidence": (ToolCall("read_ticketed", {"id": 1}), StopReason.BLOCKED, "evidence_required"),
    "failing": (ToolCall("read_flaky", {"id": 1}), StopReason.TOOL_FAILURE, "tool_error"),
}


def _flaky(**_):
    raise RuntimeError("disk on fire")


def batch_fake() -> FakeGateway:
    """Read-only tools, so every pair below runs as one parallel batch."""
    fake = FakeGateway()
    fake.add_tool("read_secret", side_effect="read", policy="approval")
    fake.add_tool("read_shadow", side_effect="read", policy="deny")
    fake.add_tool("read_ticketed", side_effect="read", policy="evidence")
    fake.add_tool("read_flaky", _flaky, side_effect="read")
    fake.add_tool("read_notes", side_effect="read")
    return fake


class AnswersLast(AsyncFakeTransport):
    """Holds back the answer to ``tool`` until the other call of the batch has its answer."""

    def __init__(self, fake: FakeGateway, tool: str) -> None:
        super().__init__(fake)
        self.tool = tool
        self.other_answered = asyncio.Event()

    async def execute(self, request):
        if request.tool == self.tool:
            await asyncio.wait_for(self.other_answered.wait(), 5)
            return await super().execute(request)
        result = await super().execute(request)
        self.other_answered.set()
        return result


@pytest.mark.parametrize("answered_last", ["approval", "partner"])
@pytest.mark.parametrize("approval_first", [True, False], ids=["approval_first", "partner_first"])
@pytest.mark.parametrize("partner", sorted(PARTNERS))
async def test_a_final_stop_in_a_parallel_batch_wins_over_an_approval_pause(
        partner, approval_first, answered_last, memory_checkpoints):
    other, expected, code = PARTNERS[partner]
    fake = batch_fake()
    gateway = AsyncGatewayClient(transport=AnswersLast(
        fake, NEEDS_APPROVAL.name if answered_last == "approval" else other.name))
    calls = (NEEDS_APPROVAL, other) if approval_first else (other, NEEDS_APPROVAL)
    result = await run_agent(AgentState(goal="x"), scripted_decide(ToolCalls(calls), Answer("done")),
                             gateway, checkpoints=memory_checkpoints)

    assert result.stop_reason is expected
    assert result.trace[-1].type == "stop" and result.trace[-1].data["reason"] == expected.value
    [approval] = fake.approvals()
    tool_codes = {o.tool: o.code for o in result.state.observations if o.kind == "tool"}
    assert tool_codes == {NEEDS_APPROVAL.name: "approval_required", other.name: code}
    [abandoned] = [o for o in result.state.observations if o.code == "approval_abandoned"]
    assert abandoned.tool == NEEDS_APPROVAL.name and abandoned.data == {"approval_id": approval.approval_id}

    stored, events = memory_checkpoints.load(result.state.run_id)
    assert stored.stop_reason is expected and stored.pending_approvals == []
    assert replay(events) == stored
    assert {"approval_id": approval.approval_id, "status": "abandoned"} in \
        [e.data for e in events if e.type == "approval_resolved"]

    fake.approve(approval.approval_id)  # an approver says yes after the run has stopped
    later = await resume(result.state.run_id, scripted_decide(Answer("done")), gateway,
                         checkpoints=memory_checkpoints)
    assert later.stop_reason is expected and later.state == stored
    assert fake.executions(NEEDS_APPROVAL.name) == []


@pytest.mark.parametrize("approval_first", [True, False], ids=["approval_first", "read_first"])
async def test_approval_pause_wins_when_nothing_else_in_the_batch_stops_the_run(
        approval_first, memory_checkpoints):
    fake = batch_fake()
    gateway = fake.async_client()
    read = ToolCall("read_notes", {"path": "a"})
    calls = (NEEDS_APPROVAL, read) if approval_first else (read, NEEDS_APPROVAL)
    paused = await run_agent(AgentState(goal="x"), scripted_decide(ToolCalls(calls), Answer("done")),
                             gateway, checkpoints=memory_checkpoints)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert [p.tool for p in paused.state.pending_approvals] == [NEEDS_APPROVAL.name]
    assert paused.state.tools_called == ["read_notes"]

    fake.approve(paused.state.pending_approvals[0].approval_id)
    done = await resume(paused.state.run_id, scripted_decide(Answer("done")), gateway,
                        checkpoints=memory_checkpoints)
    assert done.stop_reason is StopReason.SUCCESS
    assert len(fake.executions(NEEDS_APPROVAL.name)) == 1


@pytest.mark.parametrize("rejected", [0, 1], ids=["first_rejected", "second_rejected"])
async def test_resume_runs_no_approved_call_of_a_batch_whose_other_approval_was_rejected(
        rejected, memory_checkpoints):
    fake = batch_fake()
    gateway = fake.async_client()
    calls = ToolCalls((NEEDS_APPROVAL, ToolCall("read_secret", {"name": "cache"})))
    paused = await run_agent(AgentState(goal="x"), scripted_decide(calls, Answer("done")), gateway,
                             checkpoints=memory_checkpoints)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    ids = [p.approval_id for p in paused.state.pending_approvals]
    assert len(ids) == 2
    fake.reject(ids[rejected], reason="no")
    fake.approve(ids[1 - rejected])

    done = await resume(paused.state.run_id, scripted_decide(Answer("done")), gateway,
                        checkpoints=memory_checkpoints)
    assert done.stop_reason is StopReason.REFUSED
    assert fake.executions() == []
    assert done.state.pending_approvals == []
    codes = {o.data["approval_id"]: o.code for o in done.state.observations
             if o.code in ("approval_rejected", "approval_abandoned")}
    assert codes == {ids[rejected]: "approval_rejected", ids[1 - rejected]: "approval_abandoned"}
    stored, events = memory_checkpoints.load(paused.state.run_id)
    assert stored == done.state and replay(events) == stored
