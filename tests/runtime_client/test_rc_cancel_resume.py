"""Cancelling a resume: the checkpoint always keeps a stop reason, and no approval is
redeemed twice by a later resume."""

from __future__ import annotations

import asyncio

import pytest

from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, StopReason, ToolCall, ToolCalls, replay, resume, run_agent,
)
from runtime_client.testing import AsyncFakeTransport, FakeGateway, scripted_decide

SECRETS = ToolCalls((ToolCall("read_secret", {"name": "db"}), ToolCall("read_secret", {"name": "cache"})))


class HoldsSecondRedeem(AsyncFakeTransport):
    """Lets the first redeeming call through; holds the second until the test cancels it."""

    def __init__(self, fake: FakeGateway) -> None:
        super().__init__(fake)
        self.redeems = 0
        self.second_sent = asyncio.Event()

    async def execute(self, request):
        if request.approval_grant or request.approval_id:
            self.redeems += 1
            if self.redeems == 2:
                self.second_sent.set()
                await asyncio.Event().wait()  # never answered: cancelled in flight
        return await super().execute(request)


class SignalsWatch(AsyncFakeTransport):
    """Sets ``watching`` once a resume starts watching an approval."""

    def __init__(self, fake: FakeGateway) -> None:
        super().__init__(fake)
        self.watching = asyncio.Event()

    async def watch_approval(self, approval_id, *, timeout):
        self.watching.set()
        async for event in super().watch_approval(approval_id, timeout=timeout):
            yield event


async def paused_with_approvals(fake: FakeGateway, gateway, checkpoints, calls: ToolCalls = SECRETS):
    """A run paused on one approval per call of ``calls``, every one approved."""
    paused = await run_agent(AgentState(goal="x"), scripted_decide(calls, Answer("done")), gateway,
                             checkpoints=checkpoints)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert len(paused.state.pending_approvals) == len(calls.calls)
    for p in paused.state.pending_approvals:
        fake.approve(p.approval_id)
    return paused


async def cancelled_during_second_redeem(paused, gateway, transport: HoldsSecondRedeem, checkpoints):
    """Resume ``paused``, cancel it while its second redeeming call is in flight; the stored run."""
    task = asyncio.create_task(resume(paused.state.run_id, scripted_decide(Answer("done")), gateway,
                                      checkpoints=checkpoints))
    await asyncio.wait_for(transport.second_sent.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return checkpoints.load(paused.state.run_id)


def secret_fake() -> FakeGateway:
    fake = FakeGateway()
    fake.add_tool("read_secret", side_effect="read", policy="approval")
    return fake


async def test_cancel_while_redeeming_a_batch_stops_the_run_cancelled_and_redeems_nothing_twice(
        memory_checkpoints):
    fake = secret_fake()
    transport = HoldsSecondRedeem(fake)
    gateway = AsyncGatewayClient(transport=transport)
    paused = await paused_with_approvals(fake, gateway, memory_checkpoints)
    first, second = (p.approval_id for p in paused.state.pending_approvals)

    stored, events = await cancelled_during_second_redeem(paused, gateway, transport, memory_checkpoints)
    assert stored.stop_reason is StopReason.CANCELLED
    assert stored.pending_approvals == [] and replay(events) == stored
    assert len(fake.executions("read_secret")) == 1
    notes = [(o.code, o.tool, o.status, o.data) for o in stored.observations
             if o.code in ("cancelled", "approval_abandoned")]
    # the call in flight may have run: its outcome is unknown, not "abandoned" (never run)
    assert notes == [("cancelled", "read_secret", "unknown", {"approval_id": second})]
    assert [e.data for e in events if e.type == "approval_resolved"] == [
        {"approval_id": first, "status": "approved"}, {"approval_id": second, "status": "outcome_unknown"}]

    later = await resume(paused.state.run_id, scripted_decide(Answer("done")), gateway,
                         checkpoints=memory_checkpoints)
    assert later.stop_reason is StopReason.CANCELLED and later.state == stored
    assert transport.redeems == 2 and len(fake.executions("read_secret")) == 1


async def test_a_cancelled_redeem_is_outcome_unknown_and_the_calls_never_sent_are_abandoned(memory_checkpoints):
    fake = secret_fake()
    transport = HoldsSecondRedeem(fake)
    gateway = AsyncGatewayClient(transport=transport)
    three = ToolCalls(SECRETS.calls + (ToolCall("read_secret", {"name": "queue"}),))
    paused = await paused_with_approvals(fake, gateway, memory_checkpoints, three)
    first, second, third = (p.approval_id for p in paused.state.pending_approvals)

    stored, events = await cancelled_during_second_redeem(paused, gateway, transport, memory_checkpoints)
    assert stored.stop_reason is StopReason.CANCELLED and stored.pending_approvals == []
    assert [e.data for e in events if e.type == "approval_resolved"] == [
        {"approval_id": first, "status": "approved"}, {"approval_id": second, "status": "outcome_unknown"},
        {"approval_id": third, "status": "abandoned"}]
    assert [(o.code, o.data) for o in stored.observations if o.code in ("cancelled", "approval_abandoned")] == [
        ("cancelled", {"approval_id": second}), ("approval_abandoned", {"approval_id": third})]
    assert transport.redeems == 2 and len(fake.executions("read_secret")) == 1


async def test_cancel_while_waiting_for_approvals_leaves_the_run_paused_and_resumable(memory_checkpoints):
    fake = secret_fake()
    transport = SignalsWatch(fake)
    gateway = AsyncGatewayClient(transport=transport)
    paused = await run_agent(AgentState(goal="x"), scripted_decide(SECRETS, Answer("done")), gateway,
                             checkpoints=memory_checkpoints)
    fake.approve(paused.state.pending_approvals[0].approval_id)  # one of two: resume waits for the other
    waiting = asyncio.create_task(resume(paused.state.run_id, scripted_decide(Answer("done")), gateway,
                                         checkpoints=memory_checkpoints, wait=30))
    await asyncio.wait_for(transport.watching.wait(), 5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    stored, events = memory_checkpoints.load(paused.state.run_id)
    assert stored == paused.state and replay(events) == stored
    for p in paused.state.pending_approvals[1:]:
        fake.approve(p.approval_id)
    done = await resume(paused.state.run_id, scripted_decide(Answer("done")), gateway,
                        checkpoints=memory_checkpoints)
    assert done.stop_reason is StopReason.SUCCESS
    assert len(fake.executions("read_secret")) == 2
