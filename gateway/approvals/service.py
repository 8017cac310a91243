"""The approval flow, independent of gRPC: create requests, read them, submit signed
approvals and rejections, issue grants, expire. The servicer and the pipeline gate call it.
A stored request that fails validation (``gateway.approvals.malformed``: a damaged store) may
be rejected, never approved; a rejection's reason has at most ``MAX_REJECTION_REASON`` characters.

Errors raised to the servicer (one root, ``ApprovalError``; each has the ``code`` its refusal
is audited with, and ``audited`` once the service has written the refusal itself)::

    ApprovalError
    ├── NotFound          no such request visible to this caller: none, another tenant's, or
    │                     another agent's (``invalid_approval``, as the gate codes an unknown id)
    ├── PermissionDenied  the caller's role may not do this, e.g. an agent approving
    │                     (``permission_denied``)
    └── Refusal           the request or token was refused; ``code`` is the stable outcome code
"""

from __future__ import annotations

import base64
import dataclasses
import time
import uuid
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Callable

import rfc8785

from gateway.approvals import tokens
from gateway.approvals.config import ApprovalsConfig
from gateway.approvals.events import EventHub
from gateway.approvals.keyring import GrantKeys, Keyring
from gateway.approvals.malformed import past_expiry, record_problem, vote_problem, writable
from gateway.audit import AuditLog
from gateway.audit import escaped
from gateway.codes import Code
from gateway.models import ApprovalRequired, CallContext, Identity
from gateway.store._pages import BadCursor
from gateway.store.base import ApprovalRecord, ApprovalStatus, Store, Vote, VoteStatus, record_request_key, request_key

S = ApprovalStatus
MAX_REASON = 500
"""Characters of a refusal's reason kept in the audit log, written with ``escaped``: a reason can
quote what a caller sent (a status filter, a token's header fields), so it is stored as ASCII."""
MAX_REJECTION_REASON = 1000
"""Characters a rejection's reason may have: a longer one is refused (``rejection_reason_too_long``),
never cut. It is stored as signed and shown to the agent; the audit log has it escaped."""
_STATUS_CODE = {S.REJECTED: Code.APPROVAL_REJECTED, S.EXPIRED: Code.APPROVAL_EXPIRED}
PAGE_SIZE, MAX_PAGE_SIZE = 100, 500
"""Requests in one page of ``list_page`` when none is asked for, and the most one may ask for."""


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """A page of requests, each with the page token of the page that starts just after it (a
    reader that sends only some of them goes on from the last it sent), and the token of the
    next page ("": this was the last)."""

    listed: list[tuple[ApprovalRecord, str]]
    next_token: str


def token(cursor: str) -> str:
    """A store's cursor as a page token: opaque to clients (base64url, no padding)."""
    return base64.urlsafe_b64encode(cursor.encode()).decode().rstrip("=")


def _cursor(page_token: str) -> str:
    if not page_token:
        return ""
    try:
        return base64.b64decode(page_token + "=" * (-len(page_token) % 4), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise BadCursor("not base64url") from None


class ApprovalError(Exception):
    """Root of the errors the approval service raises to its callers."""

    code: Code = Code.INTERNAL_ERROR
    """The stable code the refusal is audited with."""
    audited: bool = False
    """True once the service has audited this refusal (``verification_failed``): the servicer
    must not write it again."""


class NotFound(ApprovalError):
    """No such approval request visible to this caller: the same whether it exists or not."""

    code = Code.INVALID_APPROVAL


class PermissionDenied(ApprovalError):
    """The caller's role may not do this."""

    code = Code.PERMISSION_DENIED


class Refusal(ApprovalError):
    """Refused with a stable ``code``; ``str`` is safe to show (details are audited only)."""

    def __init__(self, code: Code, message: str, *, audited: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.audited = audited


def is_approver(identity: Identity) -> bool:
    return "approver" in identity.roles and bool(identity.user)


def is_requester(identity: Identity, rec: ApprovalRecord) -> bool:
    """The agent that asked, acting for the same user (two keys may share an agent id)."""
    same = (identity.tenant, identity.agent, identity.user) == (rec.tenant, rec.agent, rec.user)
    return same and not is_approver(identity)


class ApprovalService:
    def __init__(
        self, *, gateway_id: str, settings: ApprovalsConfig, store: Store, audit: AuditLog,
        keyring: Keyring, grant_keys: GrantKeys, clock: Callable[[], float] = time.time,
    ) -> None:
        self.gateway_id = gateway_id
        self.settings = settings
        self.store = store
        self.audit = audit
        self.keyring = keyring
        self.grant_keys = grant_keys
        self.clock = clock
        self.events = EventHub(settings.watch_queue_size)

    # -- requests -------------------------------------------------------------------------

    async def create_request(self, ctx: CallContext) -> ApprovalRequired:
        """Persist a pending request for this call (or reuse the caller's identical pending one)."""
        rec = await self._pending_duplicate(ctx) or await self._new_request(ctx)
        return ApprovalRequired(
            approval_id=rec.approval_id,
            expires_at=datetime.fromtimestamp(rec.expires_at, timezone.utc),
            reasons=rec.reasons,
            approver_groups=rec.groups_any,
            quorum=rec.quorum,
            approvers=tuple(a for a in self.keyring.members_of(rec.groups_any) if a not in (rec.user, rec.agent)),
        )

    async def _new_request(self, ctx: CallContext) -> ApprovalRecord:
        now, req, ident = self.clock(), ctx.decision.approval, ctx.identity
        rec = ApprovalRecord(
            approval_id=str(uuid.uuid4()), status=S.PENDING, tenant=ident.tenant, agent=ident.agent,
            user=ident.user, run_id=ctx.call.run_id, step=ctx.call.step, tool=ctx.tool.name,
            tool_version=ctx.tool.config.version, args_json=rfc8785.dumps(ctx.args).decode(),
            args_hash=ctx.args_hash, reasons=tuple(ctx.decision.reasons), groups_any=tuple(req.groups_any),
            quorum=req.quorum, risk=ctx.tool.config.risk.model_dump(), created_at=now,
            expires_at=now + req.ttl_seconds, decision_id=ctx.decision_id, audience=self.gateway_id, updated_at=now,
        )
        await self.store.create_approval(rec)
        self._event("requested", rec, Code.APPROVAL_REQUIRED, requested_by=ident.agent, user=ident.user,
                    groups_any=list(rec.groups_any), quorum=rec.quorum, expires_at=rec.expires_at)
        return rec

    async def _pending_duplicate(self, ctx: CallContext) -> ApprovalRecord | None:
        """The caller's own pending request for this very call, found by its request key (an index):
        reading the tenant's pending requests, arguments and all, on every such call let one agent
        that had filled its tenant with large ones stall the gateway for every tenant."""
        ident, req = ctx.identity, ctx.decision.approval
        key = request_key(agent=ident.agent, user=ident.user, run_id=ctx.call.run_id, tool=ctx.tool.name,
                          args_hash=ctx.args_hash, groups_any=req.groups_any, quorum=req.quorum)
        for rec in await self.store.pending_approvals(tenant=ident.tenant, request_key=key):
            # the key again, from the record itself: the column beside it may not be what it holds
            if not record_problem(rec) and record_request_key(rec) == key:
                rec = await self.expire_if_due(rec)
                if rec.status is S.PENDING:
                    return rec
        return None

    async def expire_if_due(self, rec: ApprovalRecord) -> ApprovalRecord:
        """Move a pending or approved (unused) request past its expiry to ``expired``. An approved
        one whose grant a call has claimed is used, not unused: it reads approved until that call
        writes ``executed``. Expired under the running call, a retry was told ``approval_expired``
        (ask again: a second approval would run the side effect twice) and the call, once done,
        could no longer be recorded as executed."""
        if rec.status not in (S.PENDING, S.APPROVED) or not past_expiry(rec, self.clock()):
            return rec
        if rec.status is S.APPROVED and await self.grant_claimed(rec):
            return rec
        if not writable(rec):  # a damaged store: shown expired, as it is, though it cannot be stored so
            return dataclasses.replace(rec, status=S.EXPIRED)
        new = await self.store.transition_approval(
            rec.approval_id, from_status=rec.status, to_status=S.EXPIRED, now=self.clock())
        if new is None:
            return await self.store.get_approval(rec.approval_id) or rec
        self._event("expired", new, Code.APPROVAL_EXPIRED)
        return new

    async def grant_claimed(self, rec: ApprovalRecord) -> bool:
        """Whether a call has claimed ``rec``'s grant (``gateway.claims``): it ran, or runs."""
        jti = rec.grant_jti
        return isinstance(jti, str) and bool(jti) and await self.store.get_claim("grant", jti) is not None

    # -- reading ----------------------------------------------------------------------------

    async def get(self, identity: Identity, approval_id: str) -> ApprovalRecord:
        rec = await self.store.get_approval(approval_id)
        if rec is None or not self.visible(identity, rec):  # another agent's: answered as if none, too
            raise NotFound("no such approval request")
        return await self.expire_if_due(rec)

    async def list_page(self, identity: Identity, *, status: str = "", tenant: str = "", size: int = PAGE_SIZE,
                        page_token: str = "") -> Page:
        """One page of the caller's tenant's requests, newest first, from where ``page_token``
        (one a ``Page`` gave; "" the newest) says. The status goes into the store's query: filtered
        after, an older pending request behind a page of newer finished ones was listed nowhere.
        Expired ones are whatever the store holds past its expiry (``expire_if_due``), so for
        those every request is read and the page may hold fewer than ``size``, even none."""
        if not is_approver(identity):
            raise PermissionDenied("only approvers may list approval requests")
        if tenant and tenant != identity.tenant:
            raise PermissionDenied("approvers see only their own tenant")
        if status and status not in S.__members__.values():
            raise Refusal(Code.INVALID_ARGUMENTS, f"unknown status {status[:32]!r}")
        if not 0 < size <= MAX_PAGE_SIZE:
            raise Refusal(Code.INVALID_ARGUMENTS, f"page_size {size} is out of range: 1 to {MAX_PAGE_SIZE} "
                          f"(0 asks for {PAGE_SIZE})")
        try:
            rows = await self.store.approvals_page(tenant=identity.tenant, status="" if status == S.EXPIRED else status,
                                                   limit=size, after=_cursor(page_token))
        except BadCursor:
            raise Refusal(Code.INVALID_ARGUMENTS, "page_token is not one this gateway gave: list again from the "
                          "first page (no page_token)") from None
        listed = [(await self.expire_if_due(rec), cursor) for rec, cursor in rows]
        return Page([(r, token(c)) for r, c in listed if not status or r.status == status],
                    token(rows[-1][1]) if len(rows) == size else "")

    async def open_pages(self, identity: Identity, size: int = PAGE_SIZE) -> AsyncIterator[list[ApprovalRecord]]:
        """Page after page, every request of the caller's tenant still open: pending, or approved
        and not yet used (what an approver's ``Watch`` starts from). One page is held at a time."""
        for status in (S.PENDING, S.APPROVED):
            page_token = ""
            while True:
                page = await self.list_page(identity, status=status, size=size, page_token=page_token)
                yield [rec for rec, _ in page.listed]
                if not (page_token := page.next_token):
                    break

    def visible(self, identity: Identity, rec: ApprovalRecord) -> bool:
        return rec.tenant == identity.tenant and (is_approver(identity) or is_requester(identity, rec))

    # -- approving ----------------------------------------------------------------------------

    async def submit(self, identity: Identity, approval_id: str, token: str) -> ApprovalRecord:
        rec = await self._pending_for_approver(identity, approval_id)
        verified = self._verify_approver_token(identity, rec, token, tokens.TYP_APPROVAL)
        if problem := record_problem(rec):
            raise Refusal(Code.INVALID_APPROVAL, f"the stored request is malformed ({problem}): "
                          "it may be rejected, not approved")
        vote = await self.store.add_approval_vote(rec.approval_id, verified.issuer, verified.jti, self.clock(),
                                                  key=self.keyring.ref_of(verified.kid))
        if vote.status in (VoteStatus.JTI_REUSED, VoteStatus.NOT_PENDING, VoteStatus.NOT_FOUND):
            self._failed(rec, f"vote refused: {vote.status}", approver=verified.issuer)
            raise Refusal(Code.INVALID_APPROVAL, "the approval was refused", audited=True)
        counted = self._counted(vote)
        approvers = tuple(counted)
        if vote.status is VoteStatus.SAME_APPROVER and len(approvers) < rec.quorum and approvers == tuple(rec.approvers):
            self._event("approval_repeated", rec, Code.APPROVAL_PENDING, approver=verified.issuer, jti=verified.jti)
            return rec
        # (a repeated vote with quorum reached: the submit that reached it stopped before the grant; grant now)
        if len(approvers) >= rec.quorum:
            voted = dataclasses.replace(rec, approvers=approvers)  # watchers hear the vote that made quorum
            self._event("approved", voted, Code.OK, approver=verified.issuer, kid=verified.kid, jti=verified.jti,
                        approvers=list(approvers), quorum=rec.quorum)
            return await self._grant(rec, counted)
        new = await self.store.transition_approval(
            rec.approval_id, from_status=S.PENDING, to_status=S.PENDING, now=self.clock(), approvers=approvers)
        rec = new or await self.store.get_approval(rec.approval_id) or rec
        self._event("approved", rec, Code.APPROVAL_PENDING, approver=verified.issuer, kid=verified.kid,
                    jti=verified.jti, approvers=list(approvers), quorum=rec.quorum)
        return rec

    def _counted(self, vote: Vote) -> dict[str, str]:
        """approver -> the key of their first vote that counts: one signed with a key the keyring still
        gives them. A vote with a key since removed (a compromised key replaced) no longer counts
        toward quorum; its approver votes again with the key they hold now."""
        counted: dict[str, str] = {}
        for approver, key in vote.keys:
            if approver not in counted and self.keyring.holds(approver, key):
                counted[approver] = key
        return counted

    async def reject(self, identity: Identity, approval_id: str, token: str) -> ApprovalRecord:
        rec = await self._pending_for_approver(identity, approval_id)
        verified = self._verify_approver_token(identity, rec, token, tokens.TYP_REJECTION)
        reason = verified.claims["reason"]
        if len(reason) > MAX_REJECTION_REASON:
            raise Refusal(Code.REJECTION_REASON_TOO_LONG, f"the rejection's reason has {len(reason)} characters; "
                          f"a gateway keeps at most {MAX_REJECTION_REASON}: sign it again with a shorter one")
        new = await self.store.transition_approval(
            rec.approval_id, from_status=S.PENDING, to_status=S.REJECTED, now=self.clock(), rejection_reason=reason)
        if new is None:
            raise Refusal(Code.INVALID_APPROVAL, "the request is no longer pending")
        self._event("rejected", new, Code.APPROVAL_REJECTED, approver=verified.issuer, kid=verified.kid,
                    jti=verified.jti, reason=escaped(reason, MAX_REJECTION_REASON))
        return new

    async def _pending_for_approver(self, identity: Identity, approval_id: str) -> ApprovalRecord:
        if not is_approver(identity):
            raise PermissionDenied("only approver identities may approve or reject")
        rec = await self.store.get_approval(approval_id)
        if rec is None or rec.tenant != identity.tenant:
            raise NotFound("no such approval request")
        rec = await self.expire_if_due(rec)
        if rec.status is not S.PENDING:
            code = _STATUS_CODE.get(rec.status, Code.INVALID_APPROVAL)
            raise Refusal(code, f"the request is {rec.status}, not pending")
        return rec

    def _verify_approver_token(self, identity: Identity, rec: ApprovalRecord, token: str, typ: str) -> tokens.Verified:
        if problem := vote_problem(rec):
            raise Refusal(Code.INVALID_APPROVAL, f"the stored request is malformed ({problem}): no vote can be "
                          "verified against it or stored with it; it ends when it expires")
        expected = tokens.Expected(
            audience=self.gateway_id, approval_id=rec.approval_id, tool=rec.tool, tenant=rec.tenant,
            run_id=rec.run_id, args_hash=rec.args_hash, groups_any=rec.groups_any,
            not_issuers=tuple(x for x in (rec.user, rec.agent) if x),
        )
        limits = tokens.Limits(self.settings.clock_skew_seconds, self.settings.max_approval_lifetime_seconds)
        try:
            verified = tokens.verify(token, typ=typ, keyring=self.keyring, expected=expected,
                                     now=int(self.clock()), limits=limits)
            if verified.issuer != identity.user:
                raise tokens.TokenRejected(f"signed by {verified.issuer!r} but submitted by {identity.user!r}")
        except tokens.LifetimeRejected as exc:  # after the signature: the approver may learn the bound
            code = Code.APPROVAL_LIFETIME_OUT_OF_RANGE
            self._failed(rec, exc.reason, code, submitted_by=identity.user, token_type=typ)
            raise Refusal(code, f"the token lives {exc.lifetime} s (exp - iat); this gateway accepts approver tokens "
                          f"living 1 to {exc.max_lifetime} s (approvals.max_approval_lifetime_seconds)",
                          audited=True) from None
        except tokens.TokenRejected as exc:
            self._failed(rec, exc.reason, submitted_by=identity.user, token_type=typ)
            message = str(exc) if exc.code is Code.INVALID_APPROVAL else "approval_args_mismatch"
            raise Refusal(exc.code, message, audited=True) from None
        return verified

    async def _grant(self, rec: ApprovalRecord, counted: dict[str, str]) -> ApprovalRecord:
        """The grant of the approvers in ``counted`` (approver -> the key of the vote that counted),
        which names each one's key so the gate can tell when one is removed (``gate._check_approvers``)."""
        now = int(self.clock())
        approvers = tuple(counted)
        groups = sorted({g for a in approvers for g in self.keyring.groups_of(a)} & set(rec.groups_any))
        claims: dict[str, Any] = {
            "iss": self.gateway_id, "sub": rec.approval_id, "aud": self.gateway_id, "tool": rec.tool,
            "args_hash": rec.args_hash, "tenant": rec.tenant, "run_id": rec.run_id, "agent": rec.agent, "user": rec.user,
            "iat": now, "nbf": now, "exp": min(now + self.settings.grant_ttl_seconds, max(now + 1, int(rec.expires_at))),
            "jti": str(uuid.uuid4()), "approvers": list(approvers), "approver_keys": list(counted.values()),
            "groups": groups,
        }
        grant = tokens.sign(claims, self.grant_keys.signer, tokens.TYP_GRANT)
        new = await self.store.transition_approval(
            rec.approval_id, from_status=S.PENDING, to_status=S.APPROVED, now=now,
            approvers=approvers, grant=grant, grant_jti=claims["jti"])
        if new is None:  # a concurrent submit granted it first
            return await self.store.get_approval(rec.approval_id) or rec
        self._event("granted", new, Code.OK, approvers=list(approvers), groups=groups, grant_jti=claims["jti"],
                    grant_kid=self.grant_keys.signer.kid, grant_exp=claims["exp"])
        return new

    # -- audit + events -----------------------------------------------------------------------

    def _event(self, event: str, rec: ApprovalRecord, code: Code, **fields: Any) -> None:
        self.audit.record(
            "approval", decision_id=rec.decision_id, code=str(code), action=event, approval_id=rec.approval_id,
            tenant=rec.tenant, tool=rec.tool, args_hash=rec.args_hash, at=self.clock(), **fields)
        self.audit.flush()
        if event in ("requested", "approved", "granted", "rejected", "expired", "executed"):
            self.events.publish(event, rec)

    def _failed(self, rec: ApprovalRecord, reason: str, code: Code = Code.INVALID_APPROVAL, **fields: Any) -> None:
        self._event("verification_failed", rec, code, reason=escaped(reason, MAX_REASON), **fields)

    def record_event(self, event: str, rec: ApprovalRecord, code: Code, **fields: Any) -> None:
        """For the gate: audit (and publish) an event about ``rec``."""
        self._event(event, rec, code, **fields)
