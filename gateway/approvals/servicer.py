"""The ``Approvals`` gRPC service: proto in → ApprovalService → proto out.

Status codes: PERMISSION_DENIED for a role that may not do this (an agent approving),
NOT_FOUND for requests the caller cannot see (the same whether the id exists or not),
FAILED_PRECONDITION with the stable outcome code as details for refused tokens or finished
requests, INVALID_ARGUMENT for a malformed approval_id (refused here, before the store), an
unknown status, a page_size out of range or a page_token it did not give, RESOURCE_EXHAUSTED
past the limit of open Watch streams.

A Watch stream sends its headers (initial metadata) once it is live: subscribed, and its
snapshot read (with ``include_current``, the snapshot is read and sent after them, and a change
made meanwhile is in it or heard after it, once). A client that awaits them before acting hears
every later change.

Every refusal is audited once: event ``approval``, action ``refused``, its code, the caller,
the method and the id it named (see ``ApprovalsServicer._refuse``); token refusals the service
has audited already (``verification_failed``) are not written again.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, AsyncIterator

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.approvals.follow import Follower
from gateway.approvals.malformed import grant_problem, record_problem, salvaged
from gateway.approvals.service import (MAX_REASON, PAGE_SIZE, ApprovalError, ApprovalService, NotFound,
                                       PermissionDenied, Refusal, is_approver, is_requester)
from gateway.audit import caller_text, escaped
from gateway.auth import audit_request, require_identity
from gateway.codes import Code
from gateway.edge_limits import TenantGauge, refuse_stream_message
from gateway.models import APPROVAL_ID, APPROVAL_ID_RULE, Identity
from gateway.servicer import timestamp
from gateway.store.base import ApprovalRecord

_BAD_ID = f"approval_id {APPROVAL_ID_RULE}"
_METHOD = f"/{pb.DESCRIPTOR.services_by_name['Approvals'].full_name}/"
"""Method names in audit records, as the authentication refusals write them."""
_WATCH_TICK = 1.0
_SNAPSHOT_PAGE = 50
"""Requests read at once for a Watch's snapshot (each may hold 256 KiB of arguments)."""
LIST_BYTES = 3 * 1024 * 1024
"""A ``List`` response stops before it would pass this (and holds one request at least)."""
_WATCH_ALL = "agents may watch only their own request by id"


def add_approvals_service(server: Any, app: Any) -> None:
    service = getattr(app.approvals, "service", None)
    if isinstance(service, ApprovalService):
        limits = app.config.limits
        servicer = ApprovalsServicer(service, limits.max_watch_streams, limits.max_watch_streams_per_tenant)
        pb_grpc.add_ApprovalsServicer_to_server(servicer, server)


def record_to_proto(rec: ApprovalRecord, identity: Identity) -> pb.Approval:
    """The grant is shown only to the requesting agent. A record that fails validation is sent
    salvaged (``gateway.approvals.malformed``) with ``damage`` saying what is wrong: clients read
    that field, never a reason's text (a policy's reason may look like the mark ``salvaged``
    adds as the last reason, kept there for clients older than the field)."""
    damage = record_problem(rec)
    shown_grant = rec.grant if is_requester(identity, rec) and not grant_problem(rec) else ""  # judged on the record as stored
    rec = salvaged(rec) if damage else rec
    return pb.Approval(
        approval_id=rec.approval_id, status=str(rec.status), tenant=rec.tenant, agent=rec.agent, user=rec.user,
        run_id=rec.run_id, step=rec.step, tool=rec.tool, tool_version=rec.tool_version,
        args_json=rec.args_json.encode("utf-8", "surrogatepass"), args_hash=rec.args_hash, reasons=list(rec.reasons),
        groups_any=list(rec.groups_any), quorum=rec.quorum, created_at=_ts(rec.created_at),
        expires_at=_ts(rec.expires_at), approvers=list(rec.approvers), rejection_reason=rec.rejection_reason,
        risk=pb.Risk(**{k: str(v) for k, v in rec.risk.items() if k in ("side_effect", "reversibility", "data_sensitivity")}),
        grant=shown_grant, decision_id=rec.decision_id, audience=rec.audience,
        damage=damage,
    )


def _ts(epoch: float) -> Any:
    return timestamp(datetime.fromtimestamp(epoch, timezone.utc))


class ApprovalsServicer(pb_grpc.ApprovalsServicer):
    def __init__(self, service: ApprovalService, max_watch_streams: int = 1024, per_tenant: int = 256) -> None:
        self._svc = service
        self._watching = TenantGauge(max_watch_streams, per_tenant)

    async def List(self, request: pb.ListApprovalsRequest, context: grpc.aio.ServicerContext) -> pb.ListApprovalsResponse:
        """A page of ``page_size`` requests, cut short before it passes ``LIST_BYTES``: each may
        hold arguments of up to ``limits.max_args_bytes``, and a client takes 4 MiB by default."""
        identity = require_identity()
        listed = self._svc.list_page(identity, status=request.status, tenant=request.tenant,
                                     size=request.page_size or PAGE_SIZE, page_token=request.page_token)
        page = await self._call(context, identity, "List", None, listed)
        out, size = pb.ListApprovalsResponse(next_page_token=page.next_token), 0
        for n, (rec, _) in enumerate(page.listed):
            one = record_to_proto(rec, identity)
            size += one.ByteSize() + 8  # the field's tag and length
            if n and size > LIST_BYTES:
                out.next_page_token = page.listed[n - 1][1]
                break
            out.approvals.append(one)
        return out

    async def Get(self, request: pb.GetApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        identity, one = require_identity(), request.approval_id
        await self._check_id(context, identity, "Get", one)
        rec = await self._call(context, identity, "Get", one, self._svc.get(identity, one))
        return record_to_proto(rec, identity)

    async def Submit(self, request: pb.SubmitApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        identity, one = require_identity(), request.approval_id
        await self._check_id(context, identity, "Submit", one)
        rec = await self._call(context, identity, "Submit", one, self._svc.submit(identity, one, request.token))
        return record_to_proto(rec, identity)

    async def Reject(self, request: pb.RejectApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        identity, one = require_identity(), request.approval_id
        await self._check_id(context, identity, "Reject", one)
        rec = await self._call(context, identity, "Reject", one, self._svc.reject(identity, one, request.token))
        return record_to_proto(rec, identity)

    async def Watch(self, request: pb.WatchApprovalsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ApprovalEvent]:
        identity = require_identity()
        one = request.approval_id
        if one:
            await self._check_id(context, identity, "Watch", one)
            await self._call(context, identity, "Watch", one, self._svc.get(identity, one))  # visibility check first
        elif not is_approver(identity):  # the role ``list`` requires (the snapshot below calls it)
            await self._refuse(context, identity, "Watch", None, Code.PERMISSION_DENIED,
                               grpc.StatusCode.PERMISSION_DENIED, _WATCH_ALL)

        def match(rec: ApprovalRecord) -> bool:
            return (not one or rec.approval_id == one) and self._svc.visible(identity, rec)

        # a tenant's approvers and its other callers (agents watching their own requests) have a
        # share each: agents holding their tenant's every stream left its approvers none
        share = (identity.tenant, "approvers" if is_approver(identity) else "agents")
        if full := self._watching.enter_for(share):
            message = (refuse_stream_message("Approvals.Watch streams", self._watching.limit) if full == "process"
                       else f"{self._watching.per_tenant} Approvals.Watch streams are open for your tenant's {share[1]} "
                       "on this gateway process, their share (limits.max_watch_streams_per_tenant): close one or retry "
                       "later")
            await self._refuse(context, identity, "Watch", one or None, Code.CONCURRENCY_LIMITED,
                               grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        try:
            with self._svc.events.subscribe(match) as sub:  # before the snapshot: nothing falls between
                follower = Follower(self._svc, identity, one, tick=_WATCH_TICK)
                snapshot = await self._snapshot(context, identity, one, follower, request.include_current)
                # the stream is live: a client that awaits the headers (initial metadata) hears
                # every change made after that, as an event or (include_current) in the snapshot
                await context.send_initial_metadata(())
                async for page in snapshot:
                    follower.know(page)  # a state told as current is not heard again as an event
                    for rec in page:
                        yield pb.ApprovalEvent(type="current", approval=record_to_proto(rec, identity))
                async for event_type, rec in follower.events(sub):
                    yield pb.ApprovalEvent(type=event_type, approval=record_to_proto(rec, identity))
        finally:
            self._watching.leave_for(share)

    async def _snapshot(self, context: grpc.aio.ServicerContext, identity: Identity, one: str, follower: Follower,
                        include_current: bool) -> AsyncIterator[list[ApprovalRecord]]:
        """What a Watch starts from. Without ``include_current`` it is known to ``follower`` before
        the stream is live (else a change made while it was read would be taken as known and
        never heard). With it, the pages returned are read once the stream is live and sent as
        ``current``, each known as it is sent: a change made meanwhile is sent in the page, or
        heard as an event, and an event for a state the page showed already, or an older one,
        is not heard (``follow.progress``). An approver's stream starts from every request still
        open, page by page (``open_pages``), and what changed in the last few seconds
        (``Follower.prime``); a stream by id from its one request."""
        if one:
            rec = await self._call(context, identity, "Watch", one, self._svc.get(identity, one))
            follower.know([rec])
            return _pages([[rec]] if include_current else [])
        await follower.prime()
        if include_current:
            return self._svc.open_pages(identity, _SNAPSHOT_PAGE)
        async for page in self._svc.open_pages(identity, _SNAPSHOT_PAGE):
            follower.know(page)
        return _pages([])

    async def _check_id(self, context: grpc.aio.ServicerContext, identity: Identity, method: str,
                        approval_id: str) -> None:
        """Refuse a malformed id before it reaches the store."""
        if not APPROVAL_ID.fullmatch(approval_id):
            await self._refuse(context, identity, method, approval_id, Code.INVALID_ARGUMENTS,
                               grpc.StatusCode.INVALID_ARGUMENT, _BAD_ID)

    async def _call(self, context: grpc.aio.ServicerContext, identity: Identity, method: str,
                    approval_id: str | None, awaitable: Any) -> Any:
        """Await the service; an ``ApprovalError`` is refused (and audited, unless it was) with its status."""
        try:
            return await awaitable
        except ApprovalError as exc:
            status, details = _status(exc)
            if exc.audited:
                await context.abort(status, details)
            await self._refuse(context, identity, method, approval_id, exc.code, status, str(exc), details)

    async def _refuse(self, context: grpc.aio.ServicerContext, identity: Identity, method: str,
                      approval_id: str | None, code: Code, status: grpc.StatusCode, message: str,
                      details: str | None = None) -> None:
        """Audit the refusal, then abort with ``status`` and ``details`` (by default ``message``).

        Audited as every edge audits a request it answers (``gateway.auth.audit_request``), as
        event ``approval``, action ``refused``: its ``code``, the caller and its peer, the method,
        ``reason`` (the ``message`` the caller was shown, escaped: ``MAX_REASON``). The id it
        named, if any (``approval_id`` None: the method takes none), is hostile input, so it is
        kept only as ``caller_text`` makes it safe: ``approval_id_escaped`` (its first 64
        characters, everything outside printable ASCII escaped), ``approval_id_sha256`` (the
        whole id, UTF-8) and ``approval_id_length``."""
        named = {} if approval_id is None else caller_text("approval_id", approval_id)
        audit_request(self._svc.audit, context, _METHOD + method, identity, code, stage="approval", action="refused",
                      reason=escaped(message, MAX_REASON), at=self._svc.clock(), **named)
        await context.abort(status, message if details is None else details)


async def _pages(pages: list[list[ApprovalRecord]]) -> AsyncIterator[list[ApprovalRecord]]:
    for page in pages:
        yield page


def _status(exc: ApprovalError) -> tuple[grpc.StatusCode, str]:
    """The status and details a refusal is answered with: a NotFound says only that."""
    if isinstance(exc, NotFound):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, PermissionDenied):
        return grpc.StatusCode.PERMISSION_DENIED, str(exc)
    if isinstance(exc, Refusal):
        status = grpc.StatusCode.INVALID_ARGUMENT if exc.code is Code.INVALID_ARGUMENTS else grpc.StatusCode.FAILED_PRECONDITION
        return status, json.dumps({"code": str(exc.code), "message": str(exc)})
    return grpc.StatusCode.INTERNAL, str(exc)  # pragma: no cover - every subclass is handled above
