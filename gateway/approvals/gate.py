"""The pipeline's approval gate (``gateway.hooks.ApprovalGate``).

``verify_presented`` honours a grant presented with a call, either as the token itself or by
approval id (the gateway looks up the grant it issued). The grant is verified like any
token (signature first, grant key ring only), then bound to this call: audience, time,
approval id, tool, tenant, run, requesting agent, and the args hash of the arguments now
presented. Its approvers are re-checked against the current keyring (a removed approver, or
an approver's key that approved it and has been removed since, no longer counts). The
pipeline then claims the grant's jti, so a replay gets the stored outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.approvals import tokens
from gateway.approvals.malformed import grant_problem
from gateway.approvals.service import MAX_REASON, ApprovalService
from gateway.audit import escaped
from gateway.codes import Code
from gateway.models import CallContext, Outcome, Refused
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
    def __init__(self, reason: str, code: Code = Code.INVALID_APPROVAL, message: tuple[str, ...] = _OPAQUE) -> None:
        super().__init__(reason)
        self.reason, self.code, self.message = reason, code, message


class ApprovalGate:
    def __init__(self, service: ApprovalService) -> None:
        self.service = service

    async def verify_presented(self, ctx: CallContext) -> Refused | None:
        call = ctx.call
        if not call.approval_grant and not call.approval_id:
            return None
        try:
            rec, verified = await self._verify(ctx)
        except _Fail as exc:
            self._audit(ctx, "verification_failed", exc.code, reason=escaped(exc.reason, MAX_REASON),
                        approval_id=call.approval_id)  # the envelope's check bounds it (models.APPROVAL_ID)
            return Refused(exc.code, exc.message)
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
        approval, store = ctx.approval, self.service.store
        new = await store.transition_approval(
            approval.approval_id, from_status=S.APPROVED, to_status=S.EXECUTED, now=self.service.clock())
        if new is None:  # expired under this call by a reader that looked before the grant was claimed
            new = await store.transition_approval(
                approval.approval_id, from_status=S.EXPIRED, to_status=S.EXECUTED, now=self.service.clock())
        rec = new or await store.get_approval(approval.approval_id)
        if rec is not None:
            self.service.record_event("executed", rec, Code(str(result.code)), grant_jti=approval.grant_id,
                                      executed_by=ctx.identity.agent, execution_decision_id=ctx.decision_id)

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
            return rec, self._verify_bound(ctx, rec, signed)
        except _Fail as exc:
            if exc.code is Code.APPROVAL_EXPIRED and await self.service.store.get_claim("grant", signed.jti):
                # the request reads approved while its grant's call runs (executed is written after):
                # advice to ask again would have a second approval run the side effect twice
                raise _Fail(f"{exc.reason}; the grant is in use") from None
            raise

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
        if rec.status is S.EXPIRED:
            if await self.service.grant_claimed(rec):  # expired under the call that used it: never "ask again"
                raise _Fail("approval expired while its grant was in use")
            raise _Fail("approval expired", Code.APPROVAL_EXPIRED, (f"approval {rec.approval_id} has expired",))
        if problem := grant_problem(rec):  # a damaged store: what the grant is checked against cannot be read
            raise _Fail(f"the stored approval is malformed ({problem}): no grant can be checked against it")
        return rec

    def _verify_bound(self, ctx: CallContext, rec: ApprovalRecord, signed: tokens.Verified) -> tokens.Verified:
        svc, ident = self.service, ctx.identity
        expected = tokens.Expected(
            audience=svc.gateway_id, approval_id=rec.approval_id, tool=ctx.tool.name, tenant=ident.tenant,
            run_id=ctx.call.run_id, args_hash=ctx.args_hash, agent=ident.agent, user=ident.user,
        )
        limits = tokens.Limits(svc.settings.clock_skew_seconds, svc.settings.grant_ttl_seconds)
        try:
            verified = tokens.check_claims(signed, typ=tokens.TYP_GRANT, keyring=svc.grant_keys.keyring,
                                           expected=expected, now=int(svc.clock()), limits=limits)
        except tokens.TokenRejected as exc:
            if exc.code is Code.APPROVAL_ARGS_MISMATCH:
                raise _Fail(exc.reason, exc.code, ("the arguments differ from the approved arguments",)) from None
            if isinstance(exc, tokens.TokenExpired) and rec.status is S.APPROVED:  # issued for it, unused (_verify)
                raise _Fail(exc.reason, Code.APPROVAL_EXPIRED, (
                    f"the grant for approval {rec.approval_id} has expired (approvals.grant_ttl_seconds): "
                    "call again without it to ask for a new approval",)) from None
            raise _Fail(exc.reason) from None
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


def _votes(rec: ApprovalRecord) -> int:
    """Votes counted on ``rec`` (0 when its approvers are damaged: no list)."""
    return len(rec.approvers) if isinstance(rec.approvers, (tuple, list)) else 0


def _text(value: object) -> str:
    """Stored text as the agent can be sent it: what is not UTF-8 (a damaged row) as ``?``."""
    return value.encode("utf-8", "replace").decode() if isinstance(value, str) else ""
