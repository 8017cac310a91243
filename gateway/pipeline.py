"""The call path. ``Pipeline.execute`` reads top to bottom as DESIGN.md's pipeline.

Each stage returns ``None`` to go on or an outcome to stop with, and adds one step (its
name, outcome code and facts) to the call's audit. A call's steps are written as at most two
chained audit records:

- ``authorized`` — written and flushed to the log file *before* the tool runs (write-ahead):
  every step up to admission. A crash during execution leaves this record without a result.
- ``result`` — on every exit (refusal, error, cancellation, or after execution): the steps
  not yet written and the outcome code. Claims taken on the way are completed (executed) or
  released (not) before it is written.

Two records per executed call instead of one per step: the chain, the steps and their
facts are the same, at a quarter of the hashing and encoding (``audit.iter_steps`` reads
them back one step at a time).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from policies import PolicyEngine, PolicyError

from gateway import metrics, tracing
from gateway import policy as policy_stage
from gateway.arguments import ArgumentsError, args_hash, parse_strict
from gateway.audit import AuditLog, caller_text, escaped
from gateway.claims import ExecutionClaims, Replay, Won
from gateway.codes import Code
from gateway.config import Config
from gateway.edge_limits import Gauge
from gateway.execute import ExecuteStage, longest_hold
from gateway.hooks import ApprovalGate, CredentialResolver
from gateway.models import (
    APPROVAL_ID,
    APPROVAL_ID_RULE,
    CallContext,
    CallResult,
    EvidenceRequired,
    FieldError,
    Identity,
    Observation,
    Outcome,
    Refused,
    ToolCall,
    new_decision_id,
)
from gateway.normalize import normalize
from gateway.tools import ToolRegistry

log = structlog.get_logger("toolgate.pipeline")


@dataclass(slots=True)
class _Call:
    ctx: CallContext
    claims: list[Won] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    """Audit steps not yet written."""
    executed: bool = False
    finished_after_cancel: Observation | None = None
    """What the tool gave when it ran on after the caller went away (``_execute``)."""
    ended: asyncio.Future[None] | None = None
    """What ``_execute`` waits on for the tool's run to end; ``tool_ended`` sets it."""

    def tool_ended(self, _run: object = None) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(None)


class Pipeline:
    def __init__(
        self,
        *,
        config: Config,
        tools: ToolRegistry,
        engine: PolicyEngine,
        claims: ExecutionClaims,
        audit: AuditLog,
        approvals: ApprovalGate,
        credentials: CredentialResolver,
        executor: ExecuteStage,
    ) -> None:
        self.config = config
        self.tools = tools
        self.engine = engine
        self.claims = claims
        self.audit = audit
        self.approvals = approvals
        self.credentials = credentials
        self.executor = executor
        self.in_flight = Gauge(config.limits.max_concurrent_calls)
        """Calls in this process past authentication (``gateway.edge_limits``)."""
        self._runs: set[asyncio.Future[Observation]] = set()
        """Tools running, whether or not their caller is still there (``drain``)."""

    async def execute(self, identity: Identity, call: ToolCall) -> CallResult:
        c = _Call(CallContext(new_decision_id(), identity, call, time.monotonic()))
        self._audit(c, "authenticate", Code.OK, tenant=identity.tenant, agent=identity.agent, user=identity.user)
        result: CallResult | None = None
        refusal = _not_admitted(identity) or (None if self.in_flight.enter() else _busy(self.in_flight))
        if refusal is not None:
            self._audit(c, "admit", refusal.code)
            result = self._result(c.ctx, refusal)
            await self._finish(c, result)
            return result
        try:
            result = await self._run(c)
            return result
        except BaseException as exc:  # cancellation and bugs still end in an audited result
            if not _stops(exc):
                log.exception("pipeline_error", decision_id=c.ctx.decision_id)
            kept = c.finished_after_cancel  # the tool ran to its end: that is the outcome kept
            result = self._result(c.ctx, kept if kept is not None else _failed(c, exc))
            if not _stops(exc):
                return result
            raise
        finally:
            try:
                await self._finish(c, result)
            finally:
                self.in_flight.leave()

    async def drain(self, grace: float) -> None:
        """At shutdown, beside the server's own stop and before the store and the audit log close:
        wait up to ``grace`` seconds for the calls still in flight, then stop their tools and wait
        as long again for each to write its result. A tool whose caller went away runs to its end
        off any RPC, so the server's own grace never waited for it: the log and the store were
        closed under it, its result never written and its claim left running."""
        await self._settled(grace)
        for run in list(self._runs):
            run.cancel()
        if not await self._settled(grace):
            log.warning("calls_cut_off", in_flight=self.in_flight.open)

    async def _settled(self, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while self.in_flight.open and loop.time() < end:
            await asyncio.sleep(0.02)
        return not self.in_flight.open

    async def _run(self, c: _Call) -> CallResult:
        ctx = c.ctx
        for stage in (self._resolve, self._validate, self._idempotency, self._verify_approval):
            stop = await stage(c)
            if stop is not None:
                return stop if isinstance(stop, CallResult) else self._result(ctx, stop)
        stop = await self._policy(c)
        if stop is not None:
            return stop if isinstance(stop, CallResult) else self._result(ctx, stop)
        stop = await self.credentials.resolve(ctx)
        self._audit(c, "credentials", stop.code if stop else Code.OK, refs=[r.secret for r in ctx.tool.config.credentials])
        if stop is not None:
            return self._result(ctx, stop)
        stop = await self.executor.admit(ctx)  # rate limits + concurrency: refused calls never ran
        self._audit(c, "admit", stop.code if stop else Code.OK)
        if stop is not None:
            return self._result(ctx, stop)
        return self._result(ctx, await self._execute(c))

    # -- stages -------------------------------------------------------------------------

    async def _resolve(self, c: _Call) -> Outcome | None:
        c.ctx.tool = self.tools.resolve(c.ctx.call.tool)
        if c.ctx.tool is None:
            self._audit(c, "resolve", Code.UNKNOWN_TOOL, **caller_text("tool", c.ctx.call.tool))
            return Refused(Code.UNKNOWN_TOOL, (f"no tool named {c.ctx.call.tool[:128]!r} is registered",))
        self._audit(c, "resolve", Code.OK, tool=c.ctx.tool.name, tool_version=c.ctx.tool.config.version)
        return None

    async def _validate(self, c: _Call) -> Outcome | None:
        ctx, limit = c.ctx, self.config.limits.max_args_bytes
        try:
            if envelope := _envelope_errors(ctx.call):
                raise ArgumentsError(envelope)
            ctx.args = parse_strict(ctx.call.args_json or b"{}", max_bytes=limit)
            errors = ctx.tool.validator.errors(ctx.args)
            if errors:
                raise ArgumentsError(errors)
            ctx.args_hash = args_hash(ctx.args)
            evidence = ctx.call.evidence_json
            ctx.evidence = parse_strict(evidence, max_bytes=limit, what="evidence") if evidence else {}
        except ArgumentsError as exc:
            code = Code.INVALID_EVIDENCE if ctx.args_hash else Code.INVALID_ARGUMENTS
            self._audit(c, "validate", code, errors=len(exc.errors))
            return Refused(code, (f"{len(exc.errors)} field error(s)",), exc.errors)
        self._audit(c, "validate", Code.OK, args_hash=ctx.args_hash)
        return None

    async def _idempotency(self, c: _Call) -> CallResult | Outcome | None:
        ctx = c.ctx
        key = _derived_key(ctx) or ctx.call.idempotency_key  # the tool's fields first: see _derived_key
        if not key:
            return None
        ident = ctx.identity
        return await self._claim(c, "idempotency", f"idem:{ident.tenant}:{ctx.tool.name}", key,
                                 Code.IDEMPOTENCY_KEY_REUSED, caller=_caller_json(ident.agent, ident.user))

    async def _verify_approval(self, c: _Call) -> CallResult | Outcome | None:
        refusal = await self.approvals.verify_presented(c.ctx)
        if refusal is not None:
            return refusal
        if c.ctx.approval is not None:
            return await self._claim(c, "grant", "grant", c.ctx.approval.grant_id, Code.APPROVAL_ARGS_MISMATCH)
        return None

    async def _policy(self, c: _Call) -> Outcome | None:
        ctx = c.ctx
        doc = policy_stage.build_input(ctx, self.config.gateway_id)
        ctx.policy_version = self.engine.version
        try:
            ctx.decision = await policy_stage.decide(self.engine, doc, self.config.policy.timeout_ms)
        except PolicyError as exc:
            self._audit(c, "policy", exc.code, detail=exc.detail, policy_version=ctx.policy_version)
            return Refused(Code(exc.code), ("policy could not decide; the call is denied",))
        d = ctx.decision
        full = {"policy_input": doc} if d.audit == "full" else {}
        if d.engine_decision_id:  # OPA's own decision id, to join with OPA's decision logs
            full["engine_decision_id"] = d.engine_decision_id
        self._audit(c, "policy", Code.OK, decision=d.decision, reasons=d.reasons, policy_version=ctx.policy_version, **full)
        if self.config.policy.dry_run and d.decision != "allow":
            log.warning("dry_run_override", decision_id=ctx.decision_id, decision=d.decision)
            return None
        if d.decision == "allow":
            return None
        if d.decision == "deny":
            return Refused(Code.POLICY_DENIED, tuple(d.reasons))
        if d.decision == "require_more_evidence":
            return EvidenceRequired(tuple(d.evidence), tuple(d.reasons))
        if ctx.approval is not None:  # approved, yet the policy still wants more (e.g. quorum 2)
            return Refused(Code.INVALID_APPROVAL, ("the approval does not satisfy the policy",))
        if (unrunnable := self.executor.cannot_run(ctx)) is not None:  # never ask to approve what cannot run
            self._audit(c, "approval", unrunnable.code)
            return unrunnable
        outcome = await self.approvals.request(ctx)
        self._audit(c, "approval", outcome.code, approval_id=getattr(outcome, "approval_id", ""))
        return outcome

    async def _execute(self, c: _Call) -> Observation:
        self._write(c, "authorized", Code.OK, anchor=False)  # write-ahead: in the log file before the side effect
        c.executed = True
        # Once it has started, the tool runs to its end (or its own timeout) even if the caller goes
        # away: its outcome is what is stored under the call's key, not "cancelled", which a retry
        # would be told for a side effect that happened.
        # The wait is on a future of the call's own, not on the run (a cancel would reach it) nor
        # on asyncio.shield(run) (a loop turn more per call): the run sets it as its last step,
        # and its done-callback too, for a run cancelled before it began (``drain``).
        loop = asyncio.get_running_loop()
        run = asyncio.ensure_future(self._run_tool(c))
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)
        run.add_done_callback(c.tool_ended)
        cancelled = False
        while not run.done():
            c.ended = loop.create_future()
            try:
                await c.ended
            except asyncio.CancelledError:  # the caller went away, or the server stopped: ``drain`` stops it
                cancelled = True
        observation = run.result()
        if cancelled:
            c.finished_after_cancel = observation
            raise asyncio.CancelledError
        return observation

    async def _run_tool(self, c: _Call) -> Observation:
        ctx = c.ctx
        try:
            result, duration_ms = await self.executor.run(ctx)
            observation = normalize(ctx, result, duration_ms, self.config.limits.max_observation_bytes)
            self._audit(
                c, "execute", observation.code, status=observation.status, duration_ms=duration_ms,
                attempts=observation.attempts, error=observation.error.type if observation.error else "",
                redactions=observation.redactions, flags=list(observation.flags),
            )
            return observation
        finally:
            c.tool_ended()

    # -- plumbing -----------------------------------------------------------------------

    async def _claim(
        self, c: _Call, stage: str, scope: str, key: str, mismatch: Code, caller: str = ""
    ) -> CallResult | Outcome | None:
        """Take the execution claim on ``key``: None to go on (ours), else the stored outcome
        (replayed) or a refusal. Waits up to the tool's timeout for a running first execution;
        a claim older than the longest the tool can run was orphaned (``gateway.claims``)."""
        tool = c.ctx.tool.config
        got = await self.claims.acquire(
            scope, key, c.ctx.args_hash, wait=tool.timeout_seconds + 5, mismatch=mismatch, lease=longest_hold(tool),
            caller=caller,
        )
        if isinstance(got, Won):
            c.claims.append(got)
            self._audit(c, stage, Code.OK, claimed=True)
            return None
        if isinstance(got, Replay):
            if got.abandoned:  # the first holder died mid-call: outcome_unknown stored for the key
                self._audit(c, stage, got.result.code, abandoned=True)
            else:
                self._audit(c, stage, Code.OK, replay_of=got.result.decision_id)
            return got.result
        self._audit(c, stage, got.refusal.code)
        return got.refusal

    def _result(self, ctx: CallContext, outcome: Outcome) -> CallResult:
        return CallResult(ctx.decision_id, outcome, ctx.args_hash, ctx.policy_version)

    async def _finish(self, c: _Call, result: CallResult | None) -> None:
        ctx = c.ctx
        if not c.executed:  # whatever stopped it after admit: the concurrency slot admit took goes back
            self.executor.release(ctx)
        try:
            await self._settle_claims(c, result)
        finally:
            code = result.code if result is not None else Code.CANCELLED
            fields = dict(replayed=bool(result and result.replayed), executed=c.executed,
                          elapsed_ms=round((time.monotonic() - ctx.started) * 1000, 3))
            self._write(c, "result", code, anchor=True, **fields)
            self._observe(ctx, "result", code, fields)  # ends the call's metrics and span

    async def _settle_claims(self, c: _Call, result: CallResult | None) -> None:
        """Store the outcome under the claims taken (or release them if nothing ran).

        The answer to the caller is already decided, so a store failure here is audited and
        logged, not raised: the claim stays ``running`` and is never executed again.
        """
        ctx = c.ctx
        try:
            for won in c.claims:
                if c.executed and result is not None:
                    await self.claims.complete(won, result)
                else:
                    await self.claims.release(won)
            if c.executed and ctx.approval is not None and result is not None:
                await self.approvals.executed(ctx, result)
        except Exception as exc:
            log.error("claim_settle_failed", decision_id=ctx.decision_id, error=str(exc)[:500])
            self._audit(c, "settle", Code.INTERNAL_ERROR, executed=c.executed, error=type(exc).__name__)

    def _audit(self, c: _Call, stage: str, code: Any, **fields: Any) -> None:
        """Add one step to the call's audit; ``_write`` puts the steps in the log."""
        fields["stage"] = stage
        fields["code"] = str(code)
        c.steps.append(fields)
        self._observe(c.ctx, stage, code, fields)

    @staticmethod
    def _observe(ctx: CallContext, stage: str, code: Any, fields: dict[str, Any]) -> None:
        if metrics.enabled or tracing.enabled:  # observability, off by default: one check when off
            metrics.stage(ctx, stage, code, fields)
            tracing.stage(ctx, stage, code, fields)

    def _write(self, c: _Call, record: str, code: Any, *, anchor: bool, **fields: Any) -> None:
        """One chained record with the steps not yet written, flushed to the log file
        (``anchor``: move the head file too; once per call is enough)."""
        ctx = c.ctx
        self.audit.record(
            record, decision_id=ctx.decision_id, code=str(code), args_hash=ctx.args_hash,
            tool=ctx.tool.name if ctx.tool is not None else escaped(ctx.call.tool),  # unresolved: the caller's text
            steps=c.steps, **fields,
        )
        c.steps = []  # only once written: a record that fails keeps its steps for the next one
        self.audit.flush(anchor=anchor)


_PLAIN_TEXT = re.compile(r"[\x20-\x7e]{0,256}")


def _envelope_errors(call: ToolCall) -> list[FieldError]:
    """The caller's own labels: shown to approvers and kept in the audit, so plain text only;
    an approval id as the Approvals service takes one."""
    errors = [FieldError(name, "must be at most 256 printable ASCII characters (no control characters)")
              for name in ("run_id", "idempotency_key") if not _PLAIN_TEXT.fullmatch(getattr(call, name))]
    if call.approval_id and not APPROVAL_ID.fullmatch(call.approval_id):
        errors.append(FieldError("approval_id", APPROVAL_ID_RULE))
    return errors


def _failed(c: _Call, exc: BaseException) -> Refused:
    """What a call that ended in ``exc`` is answered (and stored under its key) with: a tool that
    started and was stopped, or after which the gateway failed, may have had its side effect, so
    ``outcome_unknown`` (a retry must not be told "cancelled" and run it again); else
    ``internal_error`` for a bug, ``cancelled`` for a cancel."""
    if c.executed:
        return Refused(Code.OUTCOME_UNKNOWN, ("the tool started, and whether it finished is unknown: "
                                              "check before calling again with a new idempotency key",))
    code = Code.CANCELLED if _stops(exc) else Code.INTERNAL_ERROR
    return Refused(code, ("the gateway failed to process the call",))


def _stops(exc: BaseException) -> bool:
    """A cancellation, or the process ending: re-raised once the call is audited. Any other
    ``BaseException`` is a failure like an ``Exception`` (pyo3 raises a Rust panic as
    ``PanicException``, a ``BaseException``): answered ``internal_error``, never ``cancelled``."""
    return isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit))


def _not_admitted(identity: Identity) -> Refused | None:
    if "agent" in identity.roles:
        return None
    return Refused(Code.PERMISSION_DENIED, (
        f"only identities with the agent role may call tools; this key has {', '.join(sorted(identity.roles)) or 'none'}",))


def _busy(in_flight: Gauge) -> Refused:
    return Refused(Code.CONCURRENCY_LIMITED, (f"this gateway process has {in_flight.limit} calls in flight, its limit",),
                   retry_after_seconds=1)


@functools.lru_cache(maxsize=4096)
def _caller_json(agent: str, user: str) -> str:
    """Who an idempotency claim is bound to (``claims.bound``), the same text for the same caller."""
    return json.dumps([agent, user])


def _derived_key(ctx: CallContext) -> str:
    """The key a tool's ``idempotency_key_fields`` form, or "". It is used even when the caller sent a
    key of its own: the fields say when two calls are the same operation (one refund per order), and a
    caller's key is fresh for every new call (the adapters send one), which would let a second refund
    of one order through. A retry still replays: the same arguments form the same key."""
    fields = ctx.tool.config.idempotency_key_fields
    if not fields or ctx.args is None or not all(f in ctx.args for f in fields):
        return ""
    return "fields:" + args_hash({f: ctx.args[f] for f in fields})
