"""Approval pause, durable checkpoint, resume exactly once."""

from __future__ import annotations

import asyncio

from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, GatewayTimeoutError, SQLiteCheckpoints, StopReason, ToolCall,
    replay, resume, run_agent,
)
from runtime_client.testing import AsyncFakeTransport, scripted_decide

WRITE = ToolCall("write_file", {"path": "notes.txt", "content": "hello"})


def write_then_answer():
    return scripted_decide(WRITE, Answer("written"))


async def test_write_without_approval_pauses_and_executes_nothing(fake, gateway, checkpoints):
    result = await run_agent(AgentState(goal="write"), write_then_answer(), gateway, checkpoints=checkpoints)
    assert result.stop_reason is StopReason.AWAITING_APPROVAL
    assert fake.executions() == []
    [pending] = result.state.pending_approvals
    assert pending.tool == "write_file" and pending.input == WRITE.input
    stored, _ = checkpoints.load(result.state.run_id)
    assert stored.stop_reason is StopReason.AWAITING_APPROVAL and stored.pending_approvals == [pending]


async def test_resume_after_approval_executes_once_and_succeeds(fake, gateway, tmp_path):
    path = tmp_path / "cp.sqlite3"
    paused = await run_agent(AgentState(goal="write"), write_then_answer(), gateway,
                             checkpoints=SQLiteCheckpoints(path))
    fake.approve(paused.state.pending_approvals[0].approval_id)
    # a fresh store object on the same file: what a new process would see
    done = await resume(paused.state.run_id, scripted_decide(Answer("written")), gateway,
                        checkpoints=SQLiteCheckpoints(path))
    assert done.stop_reason is StopReason.SUCCESS
    assert len(fake.executions("write_file")) == 1
    assert done.state.tools_called == ["write_file"] and done.state.pending_approvals == []
    again = await resume(paused.state.run_id, scripted_decide(Answer("x")), gateway,
                         checkpoints=SQLiteCheckpoints(path))
    assert again.stop_reason is StopReason.SUCCESS
    assert len(fake.executions("write_file")) == 1


async def test_resume_with_pending_approval_leaves_run_waiting(fake, gateway, checkpoints):
    paused = await run_agent(AgentState(goal="write"), write_then_answer(), gateway, checkpoints=checkpoints)
    still = await resume(paused.state.run_id, write_then_answer(), gateway, checkpoints=checkpoints)
    assert still.stop_reason is StopReason.AWAITING_APPROVAL
    assert fake.executions() == []


async def test_resume_waits_on_watch_until_approved(fake, gateway, checkpoints):
    paused = await run_agent(AgentState(goal="write"), write_then_answer(), gateway, checkpoints=checkpoints)
    approval_id = paused.state.pending_approvals[0].approval_id
    task = asyncio.create_task(resume(paused.state.run_id, scripted_decide(Answer("ok")), gateway,
                                      checkpoints=checkpoints, wait=5))
    await asyncio.sleep(0)  # let resume subscribe; the approval below is what it waits for
    fake.approve(approval_id)
    done = await asyncio.wait_for(task, 5)
    assert done.stop_reason is StopReason.SUCCESS
    assert len(fake.executions("write_file")) == 1


async def test_rejected_approval_stops_refused_without_executing(fake, gateway, checkpoints):
    paused = await run_agent(AgentState(goal="write"), write_then_answer(), gateway, checkpoints=checkpoints)
    fake.reject(paused.state.pending_approvals[0].approval_id, reason="no")
    done = await resume(paused.state.run_id, write_then_answer(), gateway, checkpoints=checkpoints)
    assert done.stop_reason is StopReason.REFUSED
    assert done.state.observations[-1].code == "approval_rejected"
    assert fake.executions() == []


async def test_grant_is_single_use_and_bound_to_args(fake):
    client = fake.async_client()
    first = await client.execute("write_file", WRITE.input)
    approval_id = first.outcome.approval_id
    fake.approve(approval_id)
    grant = await client.fetch_grant(approval_id)
    changed = await client.execute("write_file", {**WRITE.input, "content": "evil"}, approval_grant=grant)
    assert changed.code == "approval_args_mismatch"
    ok = await client.execute("write_file", WRITE.input, approval_grant=grant)
    replayed = await client.execute("write_file", WRITE.input, approval_grant=grant)
    assert ok.code == "ok" and not ok.replayed
    assert replayed.replayed and replayed.outcome == ok.outcome
    assert len(fake.executions("write_file")) == 1


class _DeadlineOnRedeem(AsyncFakeTransport):
    """The first redeeming call runs at the gateway but its answer misses the client deadline."""

    def __init__(self, fake) -> None:
        super().__init__(fake)
        self.failed = False

    async def execute(self, request):
        result = await super().execute(request)
        if request.approval_grant and not self.failed:
            self.failed = True
            raise GatewayTimeoutError("gateway DEADLINE_EXCEEDED: deadline exceeded",
                                      status="DEADLINE_EXCEEDED")
        return result


async def test_transport_error_while_redeeming_keeps_the_approval_for_the_next_resume(fake, checkpoints):
    gateway = AsyncGatewayClient(transport=_DeadlineOnRedeem(fake))
    paused = await run_agent(AgentState(goal="write"), write_then_answer(), gateway, checkpoints=checkpoints)
    fake.approve(paused.state.pending_approvals[0].approval_id)
    failed = await resume(paused.state.run_id, scripted_decide(Answer("written")), gateway,
                          checkpoints=checkpoints)
    assert failed.stop_reason is StopReason.AWAITING_APPROVAL
    assert [p.approval_id for p in failed.state.pending_approvals] == \
        [p.approval_id for p in paused.state.pending_approvals]
    assert failed.state.observations[-1].code == "transport_error"
    assert replay(failed.events) == failed.state
    done = await resume(paused.state.run_id, scripted_decide(Answer("written")), gateway,
                        checkpoints=checkpoints)
    assert done.stop_reason is StopReason.SUCCESS
    assert done.state.tools_called == ["write_file"] and done.state.pending_approvals == []
    assert len(fake.executions("write_file")) == 1
