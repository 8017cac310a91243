"""The ``Approvals`` gRPC service: proto in → ApprovalService → proto out.

Status codes: PERMISSION_DENIED for a role that may not do this (an agent approving),
NOT_FOUND for requests the caller cannot see, FAILED_PRECONDITION with the stable outcome
code as details for refused tokens or finished requests, INVALID_ARGUMENT for a malformed
approval_id (refused here, before the store, and audited: event ``refused``, code
``invalid_arguments``; see ``ApprovalService.refused_at_edge``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, AsyncIterator

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.approvals.follow import Follower
from gateway.approvals.service import ApprovalError, ApprovalService, NotFound, PermissionDenied, Refusal, is_requester
from gateway.auth import require_identity
from gateway.codes import Code
from gateway.edge_limits import Gauge, refuse_stream_message
from gateway.models import Identity
from gateway.servicer import timestamp
from gateway.store.base import ApprovalRecord

MAX_ID = 128
_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_ID}}}")
"""Ids the service makes are UUIDs; anything else (a control character, a space) is a caller's mistake."""
_BAD_ID = f"approval_id must be 1 to {MAX_ID} printable ASCII characters"
_METHOD = f"/{pb.DESCRIPTOR.services_by_name['Approvals'].full_name}/"
"""Method names in audit records, as the authentication refusals write them."""
_WATCH_TICK = 1.0


def add_approvals_service(server: Any, app: Any) -> None:
    service = getattr(app.approvals, "service", None)
    if isinstance(service, ApprovalService):
        pb_grpc.add_ApprovalsServicer_to_server(ApprovalsServicer(service, app.config.limits.max_watch_streams), server)


def record_to_proto(rec: ApprovalRecord, identity: Identity) -> pb.Approval:
    """The grant is shown only to the requesting agent."""
    return pb.Approval(
        approval_id=rec.approval_id, status=str(rec.status), tenant=rec.tenant, agent=rec.agent, user=rec.user,
        run_id=rec.run_id, step=rec.step, tool=rec.tool, tool_version=rec.tool_version,
        args_json=rec.args_json.encode(), args_hash=rec.args_hash, reasons=list(rec.reasons),
        groups_any=list(rec.groups_any), quorum=rec.quorum, created_at=_ts(rec.created_at),
        expires_at=_ts(rec.expires_at), approvers=list(rec.approvers), rejection_reason=rec.rejection_reason,
        risk=pb.Risk(**{k: str(v) for k, v in rec.risk.items() if k in ("side_effect", "reversibility", "data_sensitivity")}),
        grant=rec.grant if is_requester(identity, rec) else "", decision_id=rec.decision_id, audience=rec.audience,
    )


def _ts(epoch: float) -> Any:
    return timestamp(datetime.fromtimestamp(epoch, timezone.utc))


class ApprovalsServicer(pb_grpc.ApprovalsServicer):
    def __init__(self, service: ApprovalService, max_watch_streams: int = 1024) -> None:
        self._svc = service
        self._watching = Gauge(max_watch_streams)

    async def List(self, request: pb.ListApprovalsRequest, context: grpc.aio.ServicerContext) -> pb.ListApprovalsResponse:
        identity = require_identity()
        recs = await self._call(context, self._svc.list(identity, status=request.status, tenant=request.tenant))
        return pb.ListApprovalsResponse(approvals=[record_to_proto(r, identity) for r in recs])

    async def Get(self, request: pb.GetApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        identity = require_identity()
        await self._check_id(context, identity, "Get", request.approval_id)
        rec = await self._call(context, self._svc.get(identity, request.approval_id))
        return record_to_proto(rec, identity)

    async def Submit(self, request: pb.SubmitApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        identity = require_identity()
        await self._check_id(context, identity, "Submit", request.approval_id)
        rec = await self._call(context, self._svc.submit(identity, request.approval_id, request.token))
        return record_to_proto(rec, identity)

    async def Reject(self, request: pb.RejectApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        identity = require_identity()
        await self._check_id(context, identity, "Reject", request.approval_id)
        rec = await self._call(context, self._svc.reject(identity, request.approval_id, request.token))
        return record_to_proto(rec, identity)

    async def Watch(self, request: pb.WatchApprovalsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ApprovalEvent]:
        identity = require_identity()
        one = request.approval_id
        if one:
            await self._check_id(context, identity, "Watch", one)
            await self._call(context, self._svc.get(identity, one))  # visibility check first
        elif "approver" not in identity.roles:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "agents may watch only their own request by id")

        def match(rec: ApprovalRecord) -> bool:
            return (not one or rec.approval_id == one) and self._svc.visible(identity, rec)

        if not self._watching.enter():
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                refuse_stream_message("Approvals.Watch streams", self._watching.limit))
        try:
            with self._svc.events.subscribe(match) as sub:  # before the snapshot: nothing falls between
                current = [await self._svc.get(identity, one)] if one else await self._svc.list(identity)
                follower = Follower(self._svc, identity, one, tick=_WATCH_TICK)
                follower.know(current)
                if request.include_current:
                    for rec in current:
                        yield pb.ApprovalEvent(type="current", approval=record_to_proto(rec, identity))
                async for event_type, rec in follower.events(sub):
                    yield pb.ApprovalEvent(type=event_type, approval=record_to_proto(rec, identity))
        finally:
            self._watching.leave()

    async def _check_id(self, context: grpc.aio.ServicerContext, identity: Identity, method: str,
                        approval_id: str) -> None:
        """Refuse a malformed id before it reaches the store; the refusal is audited like the service's own."""
        if not _ID.fullmatch(approval_id):
            self._svc.refused_at_edge(identity, _METHOD + method, approval_id, _BAD_ID)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _BAD_ID)

    async def _call(self, context: grpc.aio.ServicerContext, awaitable: Any) -> Any:
        try:
            return await awaitable
        except NotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except PermissionDenied as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except Refusal as exc:
            status = grpc.StatusCode.INVALID_ARGUMENT if exc.code is Code.INVALID_ARGUMENTS else grpc.StatusCode.FAILED_PRECONDITION
            await context.abort(status, json.dumps({"code": str(exc.code), "message": str(exc)}))
        except ApprovalError as exc:  # pragma: no cover - every subclass is handled above
            await context.abort(grpc.StatusCode.INTERNAL, str(exc))
