"""Answering a policy's ``require_more_evidence``: a ``ToolCall`` carries ``evidence``, and
``run_agent``/``resume`` take an ``evidence`` provider the runtime asks when the policy wants
more. Before, nothing could: a run stopped ``blocked`` and no decision could send evidence.

The default bundle wants a ``ticket_id`` for a refund above 1000 and then two finance
approvers. Real gateway (demo config) on 127.0.0.1 port 0, real SQLite checkpoints."""

from __future__ import annotations

import pytest

from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, EvidenceRequest, StopReason, ToolCall, parse_decision, resume, run_agent,
)
from runtime_client._decisions import InvalidDecision
from tests.conftest import AGENT_KEY
from tests.runtime_client.test_rc_adapter_approvals import vote

REFUND = ToolCall("refund", {"order_id": "ORD-77", "amount": 5000})


def _once(call: ToolCall):
    def decide(state):
        return call if not any(o.kind == "tool" for o in state.observations) else Answer("done")
    return decide


def _ledger(running) -> list[str]:
    files = list(running.app.config.data_path.rglob("refunds.jsonl"))
    return [line for f in files for line in f.read_text().splitlines()]


async def test_without_evidence_the_run_stops_blocked_as_before(running, checkpoints):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        out = await run_agent(AgentState(goal="refund"), _once(REFUND), gw, checkpoints=checkpoints)
    assert out.state.stop_reason is StopReason.BLOCKED
    assert out.state.observations[-1].code == "evidence_required"


async def test_the_provider_is_asked_and_the_call_goes_on_to_approval_then_runs_once_with_its_evidence(
        running, checkpoints):
    asked: list[EvidenceRequest] = []

    async def provide(request: EvidenceRequest):
        asked.append(request)
        return {"ticket_id": "T-77"}

    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        paused = await run_agent(AgentState(goal="refund"), _once(REFUND), gw, checkpoints=checkpoints,
                                 evidence=provide)
        assert [(a.tool, a.missing, a.given) for a in asked] == [("refund", ("ticket_id",), {})]
        assert paused.state.stop_reason is StopReason.AWAITING_APPROVAL  # the policy's next ask
        assert [o.code for o in paused.state.observations if o.code] == ["evidence_supplied", "approval_required"]
        pending = paused.state.pending_approvals[0]
        assert pending.evidence == {"ticket_id": "T-77"}  # checkpointed with the call
        for approver in ("bob", "carol"):  # two finance approvers for a dual refund
            await vote(running.address, pending.approval_id, approver)
        done = await resume(paused.state.run_id, _once(REFUND), gw, checkpoints=checkpoints)
    assert done.state.stop_reason is StopReason.SUCCESS, [o.code for o in done.state.observations]
    assert len(_ledger(running)) == 1  # the approved call ran, once, with the evidence the policy asked for


async def test_evidence_in_the_decision_itself(running, checkpoints):
    call = ToolCall(REFUND.name, REFUND.input, {"ticket_id": "T-78"})
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        out = await run_agent(AgentState(goal="refund"), _once(call), gw, checkpoints=checkpoints)
    assert out.state.stop_reason is StopReason.AWAITING_APPROVAL
    assert out.state.pending_approvals[0].evidence == {"ticket_id": "T-78"}


async def test_a_provider_that_gives_none_leaves_the_run_blocked(running, checkpoints):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        out = await run_agent(AgentState(goal="refund"), _once(REFUND), gw, checkpoints=checkpoints,
                              evidence=lambda request: None)
    assert out.state.stop_reason is StopReason.BLOCKED
    assert _ledger(running) == []


async def test_evidence_the_policy_still_finds_wanting_is_asked_once(running, checkpoints):
    asked = []
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        out = await run_agent(AgentState(goal="refund"), _once(REFUND), gw, checkpoints=checkpoints,
                              evidence=lambda request: asked.append(request) or {"ticket_id": ""})  # empty: not present
    assert len(asked) == 1 and out.state.stop_reason is StopReason.BLOCKED
    assert out.state.observations[-1].code == "evidence_required"


def test_a_decision_dict_may_carry_evidence_and_it_must_be_json():
    call = parse_decision({"type": "tool", "name": "refund", "input": {"order_id": "A-1"}, "evidence": {"t": 1}})
    assert call == ToolCall("refund", {"order_id": "A-1"}, {"t": 1})
    with pytest.raises(InvalidDecision, match="evidence"):
        parse_decision(ToolCall("refund", {}, {"t": {1, 2}}))
    with pytest.raises(InvalidDecision, match="evidence must be a JSON object"):
        parse_decision(ToolCall("refund", {}, ["t"]))  # type: ignore[arg-type]
    with pytest.raises(InvalidDecision):
        parse_decision({"type": "tool", "name": "refund", "input": {}, "extra": 1})
