"""The agent loop: context → decide → (gateway) → observe, until a stop reason.

The runtime owns the budget (``max_steps`` is read once when the run starts; ``decide``
sees a copy of the state). Every state change goes through the event log; every stage
emits a trace event; the state is checkpointed after every step and at an approval pause.
The calls of one batch are all recorded before the run stops, by ``STOP_PRECEDENCE``; a run
that stops for any reason but ``awaiting_approval`` keeps no pending approval.

Cancelling the task stops the run ``cancelled`` and checkpoints it, also while ``resume``
redeems approvals (the call in flight is noted as cancelled and its approval resolved
``outcome_unknown``; the approvals not yet sent are abandoned); a resume cancelled while it only waited for
approvals leaves the run paused as it was.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from runtime_client._checkpoints import CheckpointStore, SQLiteCheckpoints
from runtime_client._client import GRANTED_STATUSES, AsyncGatewayClient
from runtime_client._context import (
    Context, ContextConfig, build_context, observation_flags, render_tool_output,
)
from runtime_client._decisions import (
    Answer, AskHuman, Decision, InvalidDecision, Stop, ToolCall, ToolCalls, parse_decision,
)
from runtime_client._errors import (
    ApprovalTimeoutError, CheckpointNotFoundError, ModelOutputError, ToolgateClientError,
)
from runtime_client._events import Event, EventLog
from runtime_client._evidence import EvidenceProvider, ask_evidence, evidence_request
from runtime_client._refusal_text import MAX_REJECTION_REASON, quoted_reason, shown_field_errors
from runtime_client._state import AgentState, PendingApproval, StopReason
from runtime_client._tool_execution import (
    CallOutcome, Halt, PlannedCall, batches, call_one, plan, run_batch, winning_halt,
)
from runtime_client._trace import TraceEvent, Tracer
from runtime_client._types import (
    Approval, ApprovalRequired, EvidenceRequired, Observation, Refused, ToolSpec,
)

Decide = Callable[..., Any]
"""``decide(state)`` or ``decide(state, context)``, sync or async, returning a decision."""

_UNSET: Any = object()
BLOCKING_CODES = frozenset({"rate_limited", "concurrency_limited", "approval_pending", "approval_expired"})
"""Refusals that stop a run ``blocked``, not ``refused``: no policy said no, but the run cannot go
on by itself (a limit, a pending approval, an expired one or its grant: a new run asks again)."""
MAX_SHOWN_INPUT = 300
"""Characters of a call's input quoted back to the model in a ``not_run`` note."""
@dataclass(frozen=True, slots=True)
class RunResult:
    state: AgentState
    trace: tuple[TraceEvent, ...]
    events: tuple[Event, ...]

    @property
    def stop_reason(self) -> StopReason | None:
        return self.state.stop_reason


def _store(checkpoints: CheckpointStore | None) -> CheckpointStore | None:
    return SQLiteCheckpoints() if checkpoints is _UNSET else checkpoints


async def _call_decide(decide: Decide, state: AgentState, context: Context) -> Any:
    try:
        takes_context = len(inspect.signature(decide).parameters) >= 2
    except (TypeError, ValueError):
        takes_context = False
    out = decide(state, context) if takes_context else decide(state)
    return await out if inspect.isawaitable(out) else out


def _stopped_why(reason: StopReason) -> str:
    return ("the run paused for approval of an earlier call" if reason is StopReason.AWAITING_APPROVAL
            else f"the run stopped ({reason.value})")


def _describe(decision: Decision) -> dict[str, Any]:
    if isinstance(decision, ToolCalls):
        return {"kind": "tool_calls", "tools": [c.name for c in decision.calls]}
    kind = {Answer: "answer", ToolCall: "tool_call", AskHuman: "ask_human", Stop: "stop"}
    return {"kind": kind[type(decision)], **{k: getattr(decision, k) for k in decision.__slots__}}


class _Runner:
    def __init__(self, log: EventLog, decide: Decide, gateway: AsyncGatewayClient,
                 store: CheckpointStore | None, tracer: Tracer, cfg: ContextConfig,
                 stop_on_tool_error: bool, evidence: EvidenceProvider | None = None) -> None:
        self.log, self.decide, self.gateway, self.store = log, decide, gateway, store
        self.evidence = evidence
        self.tracer, self.cfg, self.stop_on_tool_error = tracer, cfg, stop_on_tool_error
        self.budget = log.state.max_steps
        self.calls_per_step = log.state.max_calls_per_step
        self.tools: dict[str, ToolSpec] = {}
        self.listed = False

    @property
    def state(self) -> AgentState:
        return self.log.state

    def result(self) -> RunResult:
        return RunResult(self.state.model_copy(deep=True), tuple(self.tracer.events),
                         tuple(self.log.events))

    def checkpoint(self) -> None:
        if self.store is not None:
            self.store.save(self.state, self.log.events)

    def stop(self, reason: StopReason, step: int, **data: Any) -> None:
        if self.state.stop_reason is not None:
            return
        if reason is not StopReason.AWAITING_APPROVAL:
            self._abandon_pending(step, reason)
        self.log.record("stopped", reason=reason.value)
        self.tracer.emit("stop", self.state.run_id, step, reason=reason.value, **data)

    def observe(self, step: int, kind: str, summary: str, **fields: Any) -> None:
        self.log.record("observation_recorded", step=step, kind=kind, summary=summary, **fields)

    def settle(self, step: int, halts: list[Halt | None]) -> None:
        """Stop as the batch's outcomes, all recorded by now, say (``STOP_PRECEDENCE``)."""
        halt = winning_halt(halts)
        if halt is None:
            return
        self.stop(halt.reason, step, **halt.data)  # checkpointed by run's loop, or resume's finally

    def _abandon_pending(self, step: int, reason: StopReason) -> None:
        """A run that stops for good leaves no approval for ``resume`` to redeem."""
        for p in list(self.state.pending_approvals):
            self.log.record("approval_resolved", approval_id=p.approval_id, status="abandoned")
            self.observe(step, "runtime", f"{p.tool}: approval {p.approval_id} abandoned: run "
                         f"stopped {reason.value}", tool=p.tool, code="approval_abandoned",
                         data={"approval_id": p.approval_id})

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        try:
            while self.state.stop_reason is None:
                if self.state.steps >= self.budget:
                    self.stop(StopReason.BUDGET_EXHAUSTED, self.state.steps, budget=self.budget)
                    break
                await self.list_tools()
                await self.step()
                self.checkpoint()
        except asyncio.CancelledError:
            self.stop(StopReason.CANCELLED, self.state.steps)
            raise
        finally:
            self.checkpoint()

    async def list_tools(self) -> None:
        """The tools for the next step, from the client's cache while it is fresh (``tools_ttl``),
        so a long run sees tools the gateway adds, drops or re-rates. A failed refresh after
        the first keeps the last list (the gateway still judges every call) and says so."""
        try:
            self.tools = {t.name: t for t in await self.gateway.list_tools()}
            self.listed = True
        except ToolgateClientError as exc:
            if not self.listed:
                raise
            self.observe(self.state.steps + 1, "runtime", f"list_tools failed, kept the last "
                         f"list: {exc}", code="transport_error")

    async def step(self) -> None:
        step = self.state.steps + 1
        self.log.record("step_started", step=step)
        started = time.time()
        context = build_context(self.state, list(self.tools.values()), self.cfg)
        self.tracer.emit("context_built", self.state.run_id, step, started, **context.summary())
        decision = await self._decide(step, context)
        if decision is not None:
            await self._dispatch(step, decision)
        if self.state.stop_reason is None and self.state.steps >= self.budget:
            self.stop(StopReason.BUDGET_EXHAUSTED, step, budget=self.budget)

    async def _decide(self, step: int, context: Context) -> Decision | None:
        started = time.time()
        try:
            raw = await _call_decide(self.decide, self.state.model_copy(deep=True), context)
            decision = parse_decision(raw)
        except (InvalidDecision, ModelOutputError) as exc:
            self.tracer.emit("decision", self.state.run_id, step, started, kind="invalid", error=str(exc))
            self.observe(step, "decision", f"invalid decision: {exc}", code="invalid_decision")
            self.stop(StopReason.INVALID_DECISION, step, error=str(exc))
            return None
        described = _describe(decision)
        self.tracer.emit("decision", self.state.run_id, step, started, **described)
        self.observe(step, "decision", described["kind"], data=described)
        return decision

    async def _dispatch(self, step: int, decision: Decision) -> None:
        if isinstance(decision, Answer):
            self.log.record("message_added", role="assistant", content=decision.text)
            self.log.record("answered", text=decision.text)
            self.stop(StopReason.SUCCESS, step)
        elif isinstance(decision, Stop):
            self.stop(StopReason(decision.reason), step)
        elif isinstance(decision, AskHuman):
            self.log.record("message_added", role="assistant", content=decision.question)
            self.stop(StopReason.BLOCKED, step, question=decision.question)
        else:
            calls = decision.calls if isinstance(decision, ToolCalls) else (decision,)
            await self._run_calls(step, calls)

    async def _run_calls(self, step: int, calls: tuple[ToolCall, ...]) -> None:
        """The decision's calls, at most ``max_calls_per_step`` of them: a decision of thousands
        of calls ran them all in one step (and the read-only ones all at once), whatever the
        budget; those past the limit are not run, and the model is told."""
        planned = plan(self.state.run_id, step, calls[:self.calls_per_step])
        for batch in batches(planned, self.tools):
            if self.state.stop_reason is not None:
                for p in batch:
                    self._not_run(step, p.call, self.state.stop_reason.value, _stopped_why(self.state.stop_reason))
                continue
            outcomes = await run_batch(self.gateway, self.state.run_id, step, batch)
            outcomes = [await self._with_evidence(step, o) for o in outcomes]
            self.settle(step, [self.handle(step, o) for o in outcomes])
        for call in calls[self.calls_per_step:]:
            self._not_run(step, call, "max_calls_per_step", f"a decision may make at most {self.calls_per_step} "
                          "tool calls (max_calls_per_step)")

    def _not_run(self, step: int, call: ToolCall, reason: str, why: str) -> None:
        """A call of the decision that was not run: the batch before it stopped or paused the
        run, or it was past the step's limit. The model is told, as it is told every call's
        result, so no call it issued goes unanswered."""
        self.observe(step, "runtime", f"{call.name} not run: {why}", tool=call.name, code="not_run",
                     status="skipped", data={"input": call.input, "reason": reason})
        shown = render_tool_output(call.input)
        shown = shown if len(shown) <= MAX_SHOWN_INPUT else shown[:MAX_SHOWN_INPUT] + "…"
        self.log.record("message_added", role="assistant", content=f"[runtime] {call.name} {shown} "
                        f"was not run: {why}; call it again if it is still needed.")

    async def _with_evidence(self, step: int, outcome: CallOutcome) -> CallOutcome:
        """A call the policy wants more evidence for, sent once more with what the application's
        ``evidence`` provider gives (added to the evidence it had), under the same idempotency
        key: nothing ran, so the gateway decides it anew. Without a provider, or when it gives
        None, the outcome stands (the run stops ``blocked``)."""
        result, call = outcome.result, outcome.planned.call
        if self.evidence is None or result is None or not isinstance(result.outcome, EvidenceRequired):
            return outcome
        asked = evidence_request(call.name, call.input, result.outcome, call.evidence)
        given = await ask_evidence(self.evidence, asked)
        if given is None:
            return outcome
        again = parse_decision(ToolCall(call.name, call.input, {**asked.given, **given}))
        self.observe(step, "runtime", f"{call.name}: evidence {sorted(given)} supplied by the application",
                     tool=call.name, code="evidence_supplied", status="retried", data={"keys": sorted(given)})
        return await call_one(self.gateway, self.state.run_id, step, replace(outcome.planned, call=again))

    # ------------------------------------------------------------ outcomes

    def handle(self, step: int, outcome: CallOutcome) -> Halt | None:
        """Record one call's outcome; the stop it asks for is the caller's to ``settle``."""
        call, result = outcome.planned.call, outcome.result
        run_id = self.state.run_id
        if result is None:
            self.tracer.emit("policy_decision", run_id, step, tool=call.name, code="transport_error")
            self.observe(step, "tool", f"{call.name}: gateway error: {outcome.error}",
                         tool=call.name, code="transport_error", status="error")
            return Halt(StopReason.TOOL_FAILURE, {"error": str(outcome.error)})
        self.tracer.emit("policy_decision", run_id, step, tool=call.name, code=result.code,
                         outcome=type(result.outcome).__name__, decision_id=result.decision_id,
                         policy_version=result.policy_version, replayed=result.replayed)
        o = result.outcome
        if isinstance(o, Observation):
            return self._observed(step, call, result.decision_id, o)
        if isinstance(o, Refused):
            return self._refused(step, call, result.decision_id, o)
        if isinstance(o, ApprovalRequired):
            return self._approval_required(step, outcome.planned, result.decision_id, o)
        if isinstance(o, EvidenceRequired):
            self.observe(step, "tool", f"{call.name}: evidence required {list(o.missing)}",
                         tool=call.name, code="evidence_required", data={"missing": list(o.missing)})
            return Halt(StopReason.BLOCKED, {"code": "evidence_required"})
        raise TypeError(f"unknown outcome {type(o).__name__}")

    def _observed(self, step: int, call: ToolCall, decision_id: str, o: Observation) -> Halt | None:
        self.tracer.emit("tool_result", self.state.run_id, step, tool=call.name, status=o.status,
                         duration_ms=o.duration_ms, flags=list(o.flags))
        self.observe(step, "tool", o.summary or f"{call.name} {o.status}", tool=call.name,
                     code="ok" if o.ok else (o.error.type if o.error else "tool_error"),
                     status=o.status, data=o.data, trust="untrusted", decision_id=decision_id)
        self.log.record("tool_called", tool=call.name)
        self.log.record("message_added", role="tool", tool=call.name, trust="untrusted",
                        content=render_tool_output(o.data if o.ok else o.error and o.error.message),
                        flags=list(observation_flags(o)))
        if not o.ok and self.stop_on_tool_error:
            return Halt(StopReason.TOOL_FAILURE, {"tool": call.name})
        return None

    def _refused(self, step: int, call: ToolCall, decision_id: str, o: Refused) -> Halt:
        summary = f"{call.name} refused: {o.code}" + (f" ({'; '.join(o.reasons)})" if o.reasons else "")
        data: dict[str, Any] = {"reasons": list(o.reasons)}
        field_errors, shown = shown_field_errors(o)
        if field_errors:
            data["field_errors"] = field_errors
            data["field_errors_total"] = len(o.field_errors)
        self.observe(step, "tool", summary, tool=call.name, code=o.code, status="refused",
                     decision_id=decision_id, data=data)
        self.log.record("message_added", role="assistant", content=f"[runtime] {summary}{shown}")
        reason = StopReason.BLOCKED if o.code in BLOCKING_CODES else StopReason.REFUSED
        return Halt(reason, {"code": o.code})

    def _approval_required(self, step: int, p: PlannedCall, decision_id: str,
                           o: ApprovalRequired) -> Halt:
        self.observe(step, "tool", f"{p.call.name} awaits approval {o.approval_id}",
                     tool=p.call.name, code="approval_required", status="pending",
                     decision_id=decision_id, data={"approval_id": o.approval_id})
        self.log.record("approval_pending", approval_id=o.approval_id, tool=p.call.name,
                        input=p.call.input, step=step, idempotency_key=p.idempotency_key,
                        decision_id=decision_id, reasons=list(o.reasons),
                        **({"evidence": p.call.evidence} if p.call.evidence is not None else {}))
        return Halt(StopReason.AWAITING_APPROVAL, {"approval_id": o.approval_id})

    # ------------------------------------------------------------ resume

    async def resume(self, wait: float | None) -> None:
        """Redeem the pause's approvals, then loop. A cancel after the first redeeming call
        stops the run ``cancelled``; before it (still waiting) the pause stays as it was.

        The tools are listed first: a gateway that cannot list them fails the resume before
        anything is redeemed, so the pause stays as it was and a later resume can go on. Listed
        after the redeeming calls, the failure would leave a run with no stop reason, one that
        no resume picks up again."""
        try:
            await self.list_tools()
            if await self.redeem(wait) and self.state.stop_reason is None:
                await self.run()
        except asyncio.CancelledError:
            self.stop(StopReason.CANCELLED, self.state.steps)  # no-op while still paused
            raise
        finally:
            self.checkpoint()

    async def redeem(self, wait: float | None) -> bool:
        """Run approved pending calls exactly once. False when an approval is still pending.

        The approvals of one pause came from one batch and are judged together, so the order
        they were asked in does not matter: if any was rejected or expired, no call of the
        batch runs (the run stops, the approved rest abandoned); else every approved call runs,
        none skipped for another's outcome, and the stop follows ``STOP_PRECEDENCE``."""
        approvals = []
        for pending in self.state.pending_approvals:
            approval = await self.gateway.get_approval(pending.approval_id)
            if not approval.final and wait:
                try:
                    approval = await self.gateway.wait_for_approval(pending.approval_id, timeout=wait)
                except ApprovalTimeoutError:
                    return False
            if not approval.final:
                return False
            approvals.append((pending, approval))
        self.log.record("resumed")
        step = self.state.steps
        denied = [(p, a) for p, a in approvals if a.status not in GRANTED_STATUSES]
        if denied:
            self.settle(step, [self._not_granted(p, a) for p, a in denied])
        else:
            self.settle(step, [await self._redeem_one(p, a) for p, a in approvals])
        return True

    async def _redeem_one(self, pending: PendingApproval, approval: Approval) -> Halt | None:
        planned = PlannedCall(0, ToolCall(pending.tool, pending.input, pending.evidence),
                              f"{pending.idempotency_key}:approved")
        grant = approval.grant
        extra = {"approval_grant": grant} if grant else {"approval_id": pending.approval_id}
        try:
            outcome = await call_one(self.gateway, self.state.run_id, pending.step, planned, **extra)
        except asyncio.CancelledError:
            # sent, so not abandoned (never run): the gateway may have run it
            self.log.record("approval_resolved", approval_id=pending.approval_id, status="outcome_unknown")
            self.observe(pending.step, "tool", f"{pending.tool}: cancelled while redeeming approval "
                         f"{pending.approval_id}; the gateway may have run it", tool=pending.tool,
                         code="cancelled", status="unknown", data={"approval_id": pending.approval_id})
            raise
        if outcome.result is None:
            # the gateway may or may not have run it: keep the approval, so the next
            # resume asks again with the same idempotency key and learns the outcome
            self.observe(pending.step, "tool", f"{pending.tool}: gateway error: {outcome.error}",
                         tool=pending.tool, code="transport_error", status="error")
            return Halt(StopReason.AWAITING_APPROVAL,
                        {"approval_id": pending.approval_id, "error": str(outcome.error)})
        self.log.record("approval_resolved", approval_id=pending.approval_id, status=approval.status)
        halt = self.handle(pending.step, outcome)
        self.checkpoint()
        return halt

    def _not_granted(self, pending: PendingApproval, approval: Approval) -> Halt:
        """A rejected or expired approval. The approver's reason, if any, is told to the model,
        quoted and cut (``MAX_REJECTION_REASON``): someone's free text, not the runtime's words."""
        status = approval.status
        self.log.record("approval_resolved", approval_id=pending.approval_id, status=status)
        code = f"approval_{status}"
        summary = f"{pending.tool}: approval {status}"
        data: dict[str, Any] = {"approval_id": pending.approval_id}
        if approval.rejection_reason:
            quoted = quoted_reason(approval.rejection_reason)
            data["rejection_reason"] = approval.rejection_reason[:MAX_REJECTION_REASON]
            summary += f"; the approver's reason (their words, quoted): {quoted}"
        self.observe(pending.step, "tool", summary, tool=pending.tool,
                     code=code, status="refused", data=data)
        self.log.record("message_added", role="assistant", content=f"[runtime] {summary}")
        return Halt(StopReason.REFUSED if status == "rejected" else StopReason.BLOCKED, {"code": code})


async def run_agent(state: AgentState, decide: Decide, gateway: AsyncGatewayClient, *,
                    checkpoints: CheckpointStore | None = _UNSET, tracer: Tracer | None = None,
                    context: ContextConfig = ContextConfig(),
                    stop_on_tool_error: bool = True, evidence: EvidenceProvider | None = None) -> RunResult:
    """Run ``decide`` against ``gateway`` until a stop reason. ``checkpoints`` defaults to a
    SQLite file (``TOOLGATE_CHECKPOINTS`` or ``.toolgate/checkpoints.sqlite3``); ``None`` is off.
    ``evidence``: asked when the policy wants more evidence for a call (``EvidenceRequest``); the
    call is sent once more with what it gives, or the run stops ``blocked`` when it gives None."""
    if not isinstance(state, AgentState):
        raise TypeError("state must be an AgentState")
    if state.stop_reason is not None:
        raise ValueError(f"run {state.run_id} already stopped ({state.stop_reason}); use resume()")
    store = _store(checkpoints)
    if store is not None and _checkpointed(store, state.run_id):
        # its calls' idempotency keys (run id, step, index) are the first run's: the gateway would
        # answer them with that run's stored outcomes (replayed), not run them
        raise ValueError(f"run {state.run_id} is in the checkpoint store already: resume() it, or start "
                         "a new run with a new run_id")
    runner = _Runner(EventLog.start(state), decide, gateway, store,
                     tracer or Tracer(), context, stop_on_tool_error, evidence)
    await runner.run()
    return runner.result()


def _checkpointed(store: CheckpointStore, run_id: str) -> bool:
    try:
        store.load(run_id)
    except CheckpointNotFoundError:
        return False
    return True


async def resume(run_id: str, decide: Decide, gateway: AsyncGatewayClient, *,
                 checkpoints: CheckpointStore | None = _UNSET, wait: float | None = None,
                 tracer: Tracer | None = None, context: ContextConfig = ContextConfig(),
                 stop_on_tool_error: bool = True, evidence: EvidenceProvider | None = None) -> RunResult:
    """Continue a run paused for approval: run each approved call exactly once, then loop.

    ``wait`` (seconds) watches still-pending approvals; without it a pending approval leaves
    the run ``awaiting_approval`` unchanged.

    A run an exception stopped (``decide`` raised, or the gateway was down when it began) is
    checkpointed with no stop reason, and ``run_agent`` refuses its id: resumed, its loop goes
    on from the last checkpoint. A call it sends again has its first sending's idempotency key
    (run id, step, index), so the gateway answers one that ran with its stored outcome."""
    store = _store(checkpoints)
    if store is None:
        raise ValueError("resume needs a checkpoint store")
    state, events = store.load(run_id)
    runner = _Runner(EventLog(state, events), decide, gateway, store, tracer or Tracer(),
                     context, stop_on_tool_error, evidence)
    if state.stop_reason is None:
        await runner.run()
        return runner.result()
    if state.stop_reason is not StopReason.AWAITING_APPROVAL:
        return runner.result()
    await runner.resume(wait)
    return runner.result()
