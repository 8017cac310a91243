"""Serve a ``FakeGateway`` over real gRPC (127.0.0.1, port 0) so the gRPC transport and the
adapters can be tested over a socket before/without the real server. Protobuf stays here
and in ``_grpc``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from runtime_client._errors import ApprovalNotFoundError, TransportError
from runtime_client._fake import FakeGateway
from runtime_client._types import (
    Approval, ApprovalRequired, EvidenceRequired, ExecuteRequest, Observation, Refused, ToolResult,
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def _approval_pb(a: Approval) -> pb.Approval:
    return pb.Approval(approval_id=a.approval_id, status=a.status, tenant=a.tenant, agent=a.agent,
                       run_id=a.run_id, step=a.step, tool=a.tool, args_json=_dumps(a.args),
                       args_hash=a.args_hash, reasons=a.reasons, groups_any=a.groups_any,
                       quorum=a.quorum, approvers=a.approvers, rejection_reason=a.rejection_reason,
                       grant=a.grant, decision_id=a.decision_id)


def _result_pb(r: ToolResult) -> pb.ToolCallResponse:
    msg = pb.ToolCallResponse(decision_id=r.decision_id, args_hash=r.args_hash,
                              policy_version=r.policy_version, replayed=r.replayed, code=r.code)
    o = r.outcome
    if isinstance(o, Observation):
        p = o.provenance
        msg.observation.CopyFrom(pb.Observation(
            status=o.status, summary=o.summary, data_json=_dumps(o.data), trust=o.trust,
            duration_ms=o.duration_ms, attempts=o.attempts, flags=o.flags,
            error=pb.ErrorInfo(type=o.error.type, message=o.error.message) if o.error else None,
            provenance=pb.Provenance(tool=p.tool, tool_version=p.tool_version, args_hash=p.args_hash,
                                     decision_id=p.decision_id, approval_id=p.approval_id)))
    elif isinstance(o, Refused):
        msg.refused.CopyFrom(pb.Refused(code=o.code, reasons=o.reasons, field_errors=[
            pb.FieldError(path=e.path, message=e.message) for e in o.field_errors]))
    elif isinstance(o, ApprovalRequired):
        msg.approval_required.CopyFrom(pb.ApprovalRequired(
            approval_id=o.approval_id, reasons=o.reasons, approver_groups=o.approver_groups,
            quorum=o.quorum, approvers=o.approvers))
    elif isinstance(o, EvidenceRequired):
        msg.evidence_required.CopyFrom(pb.EvidenceRequired(missing=o.missing, reasons=o.reasons))
    return msg


class _Servicer(pb_grpc.ToolGatewayServicer, pb_grpc.ApprovalsServicer):
    def __init__(self, fake: FakeGateway, api_key: str) -> None:
        self.fake, self.api_key = fake, api_key

    async def _auth(self, context: grpc.aio.ServicerContext) -> None:
        if dict(context.invocation_metadata()).get("x-api-key") != self.api_key:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid api key")

    async def ListTools(self, request: Any, context: Any) -> pb.ListToolsResponse:
        await self._auth(context)
        return pb.ListToolsResponse(tools=[pb.ToolInfo(
            name=t.name, version=t.version, description=t.description,
            input_schema_json=json.dumps(t.input_schema),
            risk=pb.Risk(side_effect=t.risk.side_effect)) for t in self.fake.list_tools()])

    async def ExecuteTool(self, request: Any, context: Any) -> pb.ToolCallResponse:
        await self._auth(context)
        if not request.tool:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty tool name")
        req = ExecuteRequest(request.tool, json.loads(request.args_json or b"{}"), request.run_id,
                             request.step, request.idempotency_key, None,
                             request.approval_grant, request.approval_id)
        return _result_pb(await self.fake.aexecute(req))

    async def Get(self, request: Any, context: Any) -> pb.Approval:
        await self._auth(context)
        try:
            return _approval_pb(self.fake.get_approval(request.approval_id))
        except ApprovalNotFoundError:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such approval")
            raise
        except TransportError as exc:  # the fake is set unavailable
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[pb.ApprovalEvent]:
        await self._auth(context)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        unsubscribe = self.fake.subscribe(
            request.approval_id, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
        try:
            while True:
                ev = await events.get()
                yield pb.ApprovalEvent(type=ev.type, approval=_approval_pb(ev.approval))
        finally:
            unsubscribe()


@asynccontextmanager
async def serve_fake_gateway(fake: FakeGateway, *, api_key: str = "test-key") -> AsyncIterator[str]:
    """Serve ``fake`` on 127.0.0.1 (port 0); yields the ``host:port`` address."""
    async with serve_servicer(_Servicer(fake, api_key)) as address:
        yield address


@asynccontextmanager
async def serve_servicer(servicer: Any) -> AsyncIterator[str]:
    """Serve one object implementing both ToolGateway and Approvals on 127.0.0.1 (port 0);
    yields the ``host:port`` address."""
    server = grpc.aio.server()
    pb_grpc.add_ToolGatewayServicer_to_server(servicer, server)
    pb_grpc.add_ApprovalsServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)
