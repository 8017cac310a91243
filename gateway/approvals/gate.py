"""The pipeline's approval gate (``gateway.hooks.ApprovalGate``).

``verify_presented`` honours a grant presented with a call, either as the token itself or by
approval id (the gateway looks up the grant it issued). The grant is verified like any
token (signature first, grant key ring only), then bound to this call: audience, time,
approval id, tool, tenant, run, requesting agent, and the args hash of the arguments now
presented. Its approvers are re-checked against the current keyring (a removed approver, or
an approver's key that approved it and has been removed since, no longer counts). The
pipeline then claims the grant's jti, so a replay gets the stored outcome.

A grant past its time (its ``exp`` has passed, or its request reads expired) never leads to an
execution. Only when a call has already claimed its jti (so it was valid when first presented,
and consumed) and it passes every other check (signature, binding, args hash, approvers) is it
answered from that claim, which the gate reads itself and never takes (``_answer_late``): the
``outcome_unknown`` of a call orphaned by a dead gateway (abandoning its claim once older than
the tool's ``longest_hold``, as the pipeline does for a live grant); until then it is
``invalid_approval`` as it always was, saying from when. Otherwise it is refused as it always was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.approvals import tokens
from gateway.approvals.malformed import grant_problem
from gateway.approvals.service import MAX_REASON, ApprovalService
from gateway.audit import escaped
from gateway.claims import Conflict, ExecutionClaims, Replay, utc_text
from gateway.codes import Code
from gateway.execute import longest_hold
from gateway.models import CallContext, CallResult, Outcome, Refused
from gateway.store.base import ApprovalRecord, ApprovalStatus

S = ApprovalStatus
_OPAQUE = ("the approval could not be verified",)


@dataclass(frozen=True, slots=True)
class VerifiedApproval:
    grant_id: str
    approval_id: str
    approvers: tuple[str, ...]
    groups: tuple[str, ...]


class _Fail(Exception):
    def __init__(self, reason: str, code: Code = Code.INVALID_APPROVAL, message: tuple[str, ...] = _OPAQUE, *,
                 expired: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.code, self.message = reason, code, message
        self.expired = expired
        """The grant's ``exp`` has passed (the checks after it in ``tokens.check_claims`` not made)."""


class _Late(Exception):
    """The grant passed every check but its time, and a call has claimed its jti (``_answer_late``).
    ``refusal`` is what it is told when its claim cannot answer it: never advice to ask again."""

    def __init__(self, rec: ApprovalRecord, jti: str, refusal: _Fail, *, grant_expired: bool) -> None:
        super().__init__(refusal.reason)
        self.rec, self.jti, self.refusal, self.grant_expired = rec, jti, refusal, grant_expired


class ApprovalGate:
    def __init__(self, service: ApprovalService) -> None:
        self.service = service
        self._claims = ExecutionClaims(service.store)

    async def verify_presented(self, ctx: CallContext) -> Refused | CallResult | None:
        """None to go on (``ctx.approval`` set when a grant verified), else the call's answer: a
        refusal, or the replayed outcome a late grant's claim holds (``_answer_late``)."""
        call = ctx.call
        if not call.approval_grant and not call.approval_id:
            return None
        try:
            rec, verified = await self._verify(ctx)
        except _Late as late:
            return await self._answer_late(ctx, late)
        except _Fail as exc:
            return self._refuse(ctx, exc)
        ctx.approval = VerifiedApproval(
            grant_id=verified.jti, approval_id=rec.approval_id,
            approvers=tuple(verified.claims["approvers"]), groups=tuple(verified.claims["groups"]),
        )
        self._audit(ctx, "grant_verified", Code.OK, approval_id=rec.approval_id, grant_jti=verified.jti,
                    approvers=list(ctx.approval.approvers))
        return None

    async def request(self, ctx: CallContext) -> Outcome:
        return await self.service.create_request(ctx)

    async def executed(self, ctx: CallContext, result: Any) -> None:
        approval = ctx.approval
        await self._mark_executed(approval.approval_id, Code(str(result.code)), grant_jti=approval.grant_id,
                                  executed_by=ctx.identity.agent, execution_decision_id=ctx.decision_id)

    async def _mark_executed(self, approval_id: str, code: Code, **fields: Any) -> None:
        store, now = self.service.store, self.service.clock()
        new = await store.transition_approval(approval_id, from_status=S.APPROVED, to_status=S.EXECUTED, now=now)
        if new is None:  # expired under this call by a reader that looked before the grant was claimed
            new = await store.transition_approval(approval_id, from_status=S.EXPIRED, to_status=S.EXECUTED, now=now)
        rec = new or await store.get_approval(approval_id)
        if rec is not None:
            self.service.record_event("executed", rec, code, **fields)

    # -- a grant past its time ----------------------------------------------------------------

    async def _answer_late(self, ctx: CallContext, late: _Late) -> Refused | CallResult:
        """Answer a late grant (``_Late``) from its claim, never by executing: the stored
        ``outcome_unknown`` (abandoning a claim still running after the tool's ``longest_hold``:
        its gateway died mid-call), and the request is recorded executed with that code (its grant
        was used). While the grant's call may still run: ``invalid_approval`` as before, now saying
        from when a retry hears ``outcome_unknown`` and not to ask again. Anything else is refused
        as before, opaquely: a call that finished with an outcome of its own (its caller was told
        it, the request reads executed), a claim gone meanwhile."""
        got = await self._claims.settled("grant", late.jti, ctx.args_hash, mismatch=Code.APPROVAL_ARGS_MISMATCH,
                                         lease=longest_hold(ctx.tool.config))
        ids = dict(approval_id=late.rec.approval_id, grant_jti=late.jti,
                   reason=escaped(late.refusal.reason, MAX_REASON))
        if isinstance(got, Replay) and got.result.code == Code.OUTCOME_UNKNOWN:
            self._audit(ctx, "grant_abandoned" if got.abandoned else "grant_replayed", got.result.code,
                        abandoned=got.abandoned, **ids)
            if late.rec.status is not S.EXECUTED:
                await self._mark_executed(late.rec.approval_id, Code.OUTCOME_UNKNOWN, grant_jti=late.jti,
                                          abandoned=True, found_by=ctx.identity.agent,
                                          found_decision_id=ctx.decision_id)
            return got.result
        if not isinstance(got, Conflict):  # no claim any more, or one with an outcome of its own
            return self._refuse(ctx, late.refusal)
        if got.refusal.code != Code.EXECUTION_IN_PROGRESS:
            self._audit(ctx, "verification_failed", got.refusal.code, **ids)
            return got.refusal
        self._audit(ctx, "grant_in_use", Code.INVALID_APPROVAL, unknown_from=got.unknown_from, **ids)
        expired = "its grant" if late.grant_expired else "the request"
        return Refused(Code.INVALID_APPROVAL, (_in_use(late.rec.approval_id, expired, got.unknown_from),))

    def _refuse(self, ctx: CallContext, exc: _Fail) -> Refused:
        self._audit(ctx, "verification_failed", exc.code, reason=escaped(exc.reason, MAX_REASON),
                    approval_id=ctx.call.approval_id)  # the envelope's check bounds it (models.APPROVAL_ID)
        return Refused(exc.code, exc.message)

    # -- verification -------------------------------------------------------------------------

    async def _verify(self, ctx: CallContext) -> tuple[ApprovalRecord, tokens.Verified]:
        token, rec = ctx.call.approval_grant, None
        if ctx.call.approval_id:
            rec = await self._record(ctx, ctx.call.approval_id)
            token = token or rec.grant
        try:
            signed = tokens.verify_signature(token, typ=tokens.TYP_GRANT, keyring=self.service.grant_keys.keyring)
        except tokens.TokenRejected as exc:
            raise _Fail(exc.reason) from None
        if rec is None:
            rec = await self._record(ctx, signed.claims["sub"])
        if not rec.grant_jti or signed.jti != rec.grant_jti:
            raise _Fail("the grant is not the one issued for this approval")
        try:
            verified = self._verify_bound(ctx, rec, signed)
        except _Fail as exc:
            if not exc.expired or await self.service.store.get_claim("grant", signed.jti) is None:
                raise  # never claimed: expired unused (approval_expired when it reads approved)
            # claimed: the request reads approved while its grant's call runs (executed is written
            # after), or its call died. Advice to ask again would have a second approval run the side
            # effect twice; every check but the expiry still refuses what fails it.
            self._verify_bound(ctx, rec, signed, excuse_expiry=True)
            raise _Late(rec, signed.jti, _Fail(f"{exc.reason}; the grant was claimed"), grant_expired=True) from None
        if rec.status is S.EXPIRED:  # only one expired under the call that claimed its grant (_record)
            raise _Late(rec, signed.jti, _Fail("approval expired while its grant was in use"), grant_expired=False)
        return rec, verified

    async def _record(self, ctx: CallContext, approval_id: str) -> ApprovalRecord:
        rec = await self.service.store.get_approval(approval_id)
        ident = ctx.identity
        if rec is None or (rec.tenant, rec.agent, rec.user) != (ident.tenant, ident.agent, ident.user):
            raise _Fail("unknown approval id, or the caller is not the requesting agent acting for the same user")
        rec = await self.service.expire_if_due(rec)
        if rec.status is S.PENDING:
            raise _Fail("approval still pending", Code.APPROVAL_PENDING,
                        (f"approval {rec.approval_id} is still pending ({_votes(rec)}/{rec.quorum})",))
        if rec.status is S.REJECTED:
            raise _Fail("approval rejected", Code.APPROVAL_REJECTED,
                        (f"approval {rec.approval_id} was rejected: {_text(rec.rejection_reason)}",))
        if rec.status is S.EXPIRED and not await self.service.grant_claimed(rec):
            raise _Fail("approval expired", Code.APPROVAL_EXPIRED, (f"approval {rec.approval_id} has expired",))
        # expired under the call that claimed its grant: never "ask again"; ``_verify`` answers it late
        if problem := grant_problem(rec):  # a damaged store: what the grant is checked against cannot be read
            raise _Fail(f"the stored approval is malformed ({problem}): no grant can be checked against it")
        return rec

    def _verify_bound(self, ctx: CallContext, rec: ApprovalRecord, signed: tokens.Verified, *,
                      excuse_expiry: bool = False) -> tokens.Verified:
        """The grant's claims checked against this call, then its approvers. ``excuse_expiry``:
        every check but ``exp`` (``tokens.check_claims_excusing_expiry``), for a grant whose jti a
        call has claimed, answered from that claim only."""
        svc, ident = self.service, ctx.identity
        expected = tokens.Expected(
            audience=svc.gateway_id, approval_id=rec.approval_id, tool=ctx.tool.name, tenant=ident.tenant,
            run_id=ctx.call.run_id, args_hash=ctx.args_hash, agent=ident.agent, user=ident.user,
        )
        limits = tokens.Limits(svc.settings.clock_skew_seconds, svc.settings.grant_ttl_seconds)
        check = tokens.check_claims_excusing_expiry if excuse_expiry else tokens.check_claims
        try:
            verified = check(signed, typ=tokens.TYP_GRANT, keyring=svc.grant_keys.keyring, expected=expected,
                             now=int(svc.clock()), limits=limits)
        except tokens.TokenRejected as exc:
            if exc.code is Code.APPROVAL_ARGS_MISMATCH:
                raise _Fail(exc.reason, exc.code, ("the arguments differ from the approved arguments",)) from None
            expired = isinstance(exc, tokens.TokenExpired)
            if expired and rec.status is S.APPROVED:  # issued for it, unused unless claimed (_verify)
                raise _Fail(exc.reason, Code.APPROVAL_EXPIRED, (
                    f"the grant for approval {rec.approval_id} has expired (approvals.grant_ttl_seconds): "
                    "call again without it to ask for a new approval",), expired=True) from None
            raise _Fail(exc.reason, expired=expired) from None
        self._check_approvers(ctx, rec, verified.claims["approvers"], verified.claims["approver_keys"])
        return verified

    def _check_approvers(self, ctx: CallContext, rec: ApprovalRecord, approvers: list[str], keys: list[str]) -> None:
        keyring = self.service.keyring
        requester = {x for x in (rec.user, rec.agent, ctx.identity.user, ctx.identity.agent) if x}
        valid = {a for a in approvers if keyring.groups_of(a) & set(rec.groups_any) and a not in requester}
        if len(valid) < rec.quorum or len(valid) != len(approvers):
            raise _Fail(f"grant approvers {approvers} no longer satisfy quorum {rec.quorum} of {list(rec.groups_any)}")
        if len(keys) != len(approvers) or not all(keyring.holds(a, k) for a, k in zip(approvers, keys)):
            raise _Fail(f"a key grant approvers {approvers} approved with is no longer in the keyring")

    def _audit(self, ctx: CallContext, event: str, code: Code, **fields: Any) -> None:
        self.service.audit.record("approval", decision_id=ctx.decision_id, code=str(code), action=event,
                                  at=self.service.clock(), **fields)


def _in_use(approval_id: str, expired: str, unknown_from: float | None) -> str:
    """What a late grant is told while its call may still run: not to ask again, and until when."""
    when = f"from {utc_text(unknown_from)}" if unknown_from is not None else "later"
    return (f"approval {approval_id}: {expired} has expired while the call that used its grant has not finished: "
            f"it is not run again, and a second approval would run it twice; if the gateway running it stopped, "
            f"a retry {when} is answered outcome_unknown")


def _votes(rec: ApprovalRecord) -> int:
    """Votes counted on ``rec`` (0 when its approvers are damaged: no list)."""
    return len(rec.approvers) if isinstance(rec.approvers, (tuple, list)) else 0


def _text(value: object) -> str:
    """Stored text as the agent can be sent it: what is not UTF-8 (a damaged row) as ``?``."""
    return value.encode("utf-8", "replace").decode() if isinstance(value, str) else ""
