"""The gRPC edge: proto in → domain model → pipeline → proto out. Nothing else.

A request refused here, before the pipeline (which audits its own), is audited once
(``request``, its code, the method, the caller, the peer, the reason shown to the caller)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from policies import PolicyError

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.audit import caller_text
from gateway.auth import audit_request, require_identity
from gateway.codes import Code
from gateway.execute import longest_run
from gateway.models import ApprovalRequired, CallResult, EvidenceRequired, Identity, Observation, Refused, ToolCall
from gateway.normalize import data_json

MAX_NAME = 256
_METHOD = f"/{pb.DESCRIPTOR.services_by_name['ToolGateway'].full_name}/"


class ToolGatewayServicer(pb_grpc.ToolGatewayServicer):
    def __init__(self, app: Any) -> None:
        self._app = app

    async def ListTools(self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext) -> pb.ListToolsResponse:
        identity = require_identity()
        if "agent" not in identity.roles:
            await self._refuse(context, identity, "ListTools", Code.PERMISSION_DENIED,
                               grpc.StatusCode.PERMISSION_DENIED, "only identities with the agent role may list tools")
        try:
            tools = await self._app.visible_tools(identity)
        except PolicyError:  # every check failed: the policy could not say, which is not "none"
            await self._refuse(context, identity, "ListTools", Code.POLICY_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE,
                               "the policy could not decide which tools this caller may see; try again later")
        return pb.ListToolsResponse(tools=[_tool_info(t) for t in tools])

    async def ExecuteTool(self, request: pb.ToolCallRequest, context: grpc.aio.ServicerContext) -> pb.ToolCallResponse:
        identity = require_identity()
        if not request.tool or len(request.tool) > MAX_NAME:
            await self._refuse(context, identity, "ExecuteTool", Code.INVALID_ARGUMENTS,
                               grpc.StatusCode.INVALID_ARGUMENT, "tool must be a name of 1 to 256 characters",
                               **caller_text("tool", request.tool))
        call = ToolCall(
            tool=request.tool,
            args_json=request.args_json,
            run_id=request.run_id,
            step=request.step,
            idempotency_key=request.idempotency_key,
            evidence_json=request.evidence_json,
            approval_grant=request.approval_grant,
            approval_id=request.approval_id,
        )
        result = await self._app.pipeline.execute(identity, call)
        return result_to_proto(result)

    async def _refuse(self, context: grpc.aio.ServicerContext, identity: Identity, method: str, code: Code,
                      status: grpc.StatusCode, reason: str, **named: Any) -> None:
        """Audit a refusal the pipeline never saw, then abort with ``status``; ``named``: what
        the caller sent, already made safe to store (``caller_text``)."""
        audit_request(self._app.audit, context, _METHOD + method, identity, code, reason=reason, **named)
        await context.abort(status, reason)


def _tool_info(tool: Any) -> pb.ToolInfo:
    c = tool.config
    return pb.ToolInfo(
        name=c.name,
        version=c.version,
        description=c.description,
        input_schema_json=tool.schema_json,
        risk=pb.Risk(**c.risk.model_dump()),
        labels=c.labels,
        longest_call_seconds=longest_run(c),
    )


def timestamp(dt: Any) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(dt)
    return ts


def result_to_proto(result: CallResult) -> pb.ToolCallResponse:
    o = result.outcome
    common = dict(
        decision_id=result.decision_id,
        args_hash=result.args_hash,
        policy_version=result.policy_version,
        replayed=result.replayed,
        code=str(result.code),
    )
    # each outcome built in place (a constructor argument), not built and then copied in
    if isinstance(o, Observation):
        return pb.ToolCallResponse(observation=_observation(o), **common)
    if isinstance(o, Refused):
        return pb.ToolCallResponse(
            refused=pb.Refused(
                code=str(o.code),
                reasons=o.reasons,
                field_errors=[pb.FieldError(path=e.path, message=e.message) for e in o.field_errors],
                retry_after_seconds=o.retry_after_seconds,
            ),
            **common,
        )
    if isinstance(o, ApprovalRequired):
        return pb.ToolCallResponse(
            approval_required=pb.ApprovalRequired(
                approval_id=o.approval_id,
                expires_at=timestamp(o.expires_at),
                reasons=o.reasons,
                approver_groups=o.approver_groups,
                quorum=o.quorum,
                approvers=o.approvers,
            ),
            **common,
        )
    if isinstance(o, EvidenceRequired):
        return pb.ToolCallResponse(evidence_required=pb.EvidenceRequired(missing=o.missing, reasons=o.reasons), **common)
    return pb.ToolCallResponse(**common)


def _observation(o: Observation) -> pb.Observation:
    p = o.provenance
    return pb.Observation(
        status=o.status,
        summary=o.summary,
        data_json=data_json(o.data),  # compact, as normalize measured it against max_observation_bytes
        truncated=o.truncated,
        error=pb.ErrorInfo(type=o.error.type, message=o.error.message, retryable=o.error.retryable) if o.error else None,
        duration_ms=o.duration_ms,
        attempts=o.attempts,
        redactions=o.redactions,
        trust=o.trust,
        flags=o.flags,
        provenance=pb.Provenance(
            tool=p.tool, tool_version=p.tool_version, args_hash=p.args_hash, decision_id=p.decision_id,
            approval_id=p.approval_id,
        ),
    )
