"""gRPC transports. The only module that touches protobuf: convert at this edge.

gRPC errors become ``runtime_client`` exceptions here (``_translate``), nowhere else. Every call
on a channel goes through ``_translated`` / ``_atranslated``: after ``close()`` a call raises
``ClientClosedError`` (never grpc's ``UsageError`` / ``ValueError`` for a closed channel), and so
does a call that ``close()`` cut off mid-flight.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timezone
from typing import Any

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from runtime_client._errors import (
    ApprovalNotFoundError,
    AuthenticationError,
    ClientClosedError,
    GatewayTimeoutError,
    MalformedRequestError,
    ToolgateClientError,
    TransportError,
)
from runtime_client._types import (
    Approval,
    ApprovalEvent,
    ApprovalRequired,
    ErrorInfo,
    EvidenceRequired,
    ExecuteRequest,
    FieldError,
    Observation,
    Provenance,
    Refused,
    Risk,
    ToolResult,
    ToolSpec,
)

# ---------------------------------------------------------------- proto -> domain

MALFORMED_RESPONSE = "malformed_response"
"""``TransportError.code`` of a response that reached the client but cannot be read."""


def _json(raw: bytes | str, default: Any = None) -> Any:
    if not raw:
        return default
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # also invalid UTF-8; nested past the parser's depth
        raise TransportError(f"gateway sent a malformed response: {type(exc).__name__}: {exc}",
                             code=MALFORMED_RESPONSE) from exc


def _time(ts: Any) -> datetime | None:
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    try:
        return ts.ToDatetime(tzinfo=timezone.utc)
    except (ValueError, OverflowError) as exc:
        raise TransportError(f"gateway sent a malformed response: {exc}", code=MALFORMED_RESPONSE) from exc


def tool_from_proto(msg: pb.ToolInfo) -> ToolSpec:
    risk = Risk(msg.risk.side_effect, msg.risk.reversibility, msg.risk.data_sensitivity)
    return ToolSpec(
        name=msg.name,
        description=msg.description,
        input_schema=_json(msg.input_schema_json, {"type": "object"}),
        risk=risk,
        version=msg.version,
        labels=tuple(msg.labels),
        longest_call_seconds=_seconds(msg.longest_call_seconds),
    )


def _seconds(value: float) -> float | None:
    """A tool's time the gateway sent: None unless a number of seconds up to a day."""
    return min(value, 86400.0) if math.isfinite(value) and value > 0 else None


def _observation(msg: pb.Observation) -> Observation:
    error = None
    if msg.HasField("error") and msg.error.type:
        error = ErrorInfo(msg.error.type, msg.error.message, msg.error.retryable)
    p = msg.provenance
    return Observation(
        status=msg.status,
        summary=msg.summary,
        data=_json(msg.data_json),
        truncated=msg.truncated,
        error=error,
        duration_ms=msg.duration_ms,
        attempts=msg.attempts,
        redactions=msg.redactions,
        trust=msg.trust or "untrusted",
        flags=tuple(msg.flags),
        provenance=Provenance(p.tool, p.tool_version, p.args_hash, p.decision_id, p.approval_id),
    )


def _outcome(msg: pb.ToolCallResponse) -> Any:
    kind = msg.WhichOneof("outcome")
    if kind == "observation":
        return _observation(msg.observation)
    if kind == "refused":
        r = msg.refused
        errors = tuple(FieldError(e.path, e.message) for e in r.field_errors)
        return Refused(r.code, tuple(r.reasons), errors, r.retry_after_seconds)
    if kind == "approval_required":
        a = msg.approval_required
        return ApprovalRequired(
            a.approval_id, _time(a.expires_at), tuple(a.reasons),
            tuple(a.approver_groups), a.quorum or 1, tuple(a.approvers),
        )
    if kind == "evidence_required":
        e = msg.evidence_required
        return EvidenceRequired(tuple(e.missing), tuple(e.reasons))
    raise TransportError("gateway response carries no outcome", code=MALFORMED_RESPONSE)


def result_from_proto(tool: str, msg: pb.ToolCallResponse) -> ToolResult:
    return ToolResult(
        tool=tool,
        outcome=_outcome(msg),
        code=msg.code,
        decision_id=msg.decision_id,
        args_hash=msg.args_hash,
        policy_version=msg.policy_version,
        replayed=msg.replayed,
    )


def approval_from_proto(msg: pb.Approval) -> Approval:
    args, damage = _approval_args(msg)
    return Approval(
        approval_id=msg.approval_id,
        status=msg.status,
        tool=msg.tool,
        args=args,
        damage=damage,
        args_hash=msg.args_hash,
        run_id=msg.run_id,
        step=msg.step,
        tenant=msg.tenant,
        agent=msg.agent,
        reasons=tuple(msg.reasons),
        groups_any=tuple(msg.groups_any),
        quorum=msg.quorum or 1,
        approvers=tuple(msg.approvers),
        rejection_reason=msg.rejection_reason,
        grant=msg.grant,
        decision_id=msg.decision_id,
        created_at=_time(msg.created_at),
        expires_at=_time(msg.expires_at),
    )


def _approval_args(msg: pb.Approval) -> tuple[dict[str, Any], str]:
    """The request's arguments and what the gateway says is damaged in it. Arguments that are no
    JSON object (a damaged store: the gateway sends them as stored) are ``{}`` and named in
    ``damage``: a malformed response error here kept a run from learning its request's status,
    so no resume could go on, not even to hear that it was rejected."""
    try:
        args = _json(msg.args_json, {})
    except TransportError:
        args = None
    if not isinstance(args, dict):
        return {}, msg.damage or "args_json: not a JSON object"
    return args, msg.damage


def event_from_proto(msg: pb.ApprovalEvent) -> ApprovalEvent:
    return ApprovalEvent(msg.type, approval_from_proto(msg.approval))


# ---------------------------------------------------------------- domain -> proto


def request_to_proto(req: ExecuteRequest) -> pb.ToolCallRequest:
    return pb.ToolCallRequest(
        tool=req.tool,
        args_json=json.dumps(req.args, separators=(",", ":")).encode(),
        run_id=req.run_id,
        step=req.step,
        idempotency_key=req.idempotency_key,
        evidence_json=json.dumps(req.evidence).encode() if req.evidence else b"",
        approval_grant=req.approval_grant,
        approval_id=req.approval_id,
    )


# ---------------------------------------------------------------- errors

_AUTH = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}


def _translate(exc: grpc.RpcError, approval_id: str | None = None) -> ToolgateClientError:
    """``exc`` as a client error. ``approval_id``: the call was about that approval (Get,
    Watch), so NOT_FOUND means the gateway has none this caller may see: no transport failure,
    and asking again will not find it."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    name = code.name if code is not None else "UNKNOWN"
    message = f"gateway {name}: {detail}"
    if code in _AUTH:
        return AuthenticationError(message, status=name)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return MalformedRequestError(message)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return GatewayTimeoutError(message, status=name)
    if code == grpc.StatusCode.NOT_FOUND and approval_id is not None:
        return ApprovalNotFoundError(f"no approval {approval_id!r} at the gateway for this caller "
                                     f"({message})", approval_id=approval_id)
    return TransportError(message, status=name)


@contextmanager
def _translated(transport: GrpcTransport, approval_id: str | None = None) -> Iterator[None]:
    """One call on ``transport``'s channel, refused once it is closed; gRPC errors translated.
    A call cut off by ``close()`` (CANCELLED "Channel closed!") is a ``ClientClosedError``."""
    if transport._closed:
        raise ClientClosedError()
    try:
        yield
    except grpc.RpcError as exc:
        raise (ClientClosedError() if transport._closed else _translate(exc, approval_id)) from exc
    except ValueError as exc:  # grpc: "Cannot invoke RPC on closed channel!" (close() raced the call)
        if transport._closed:
            raise ClientClosedError() from exc
        raise


@asynccontextmanager
async def _atranslated(transport: AsyncGrpcTransport, approval_id: str | None = None) -> AsyncIterator[None]:
    """As ``_translated``, for ``grpc.aio``: a closed channel raises ``UsageError`` and cancels
    the calls in flight (``CancelledError`` though the task was not cancelled)."""
    if transport._closed:
        raise ClientClosedError()
    try:
        yield
    except grpc.RpcError as exc:
        raise (ClientClosedError() if transport._closed else _translate(exc, approval_id)) from exc
    except grpc.aio.UsageError as exc:
        raise (ClientClosedError() if transport._closed
               else TransportError(f"gRPC usage error: {exc}")) from exc
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if transport._closed and task is not None and not task.cancelling():
            raise ClientClosedError() from None
        raise


# ---------------------------------------------------------------- transports


class _Deadlines:
    """How long an ExecuteTool call may take: the transport's ``timeout`` and the longest a call
    of the tool can take at the gateway (``ToolInfo.longest_call_seconds``, learnt from each tool
    list; a transport that has none asks for one before its first calls). With the ``timeout`` alone
    a tool allowed to run longer was cut off by the deadline while the gateway still ran it,
    and its answer, whatever it was, was lost (``GatewayTimeoutError``)."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._tools: dict[str, float] | None = None

    @property
    def known(self) -> bool:
        return self._tools is not None

    def learn(self, tools: list[ToolSpec]) -> list[ToolSpec]:
        self._tools = {t.name: t.longest_call_seconds for t in tools if t.longest_call_seconds}
        return tools

    def unknown(self) -> None:
        """The listing failed: calls wait ``timeout`` alone until a later listing succeeds (not
        asked again before each call, which would wait for the failure every time)."""
        if self._tools is None:
            self._tools = {}

    def of(self, tool: str) -> float:
        return self._timeout + (self._tools or {}).get(tool, 0.0)


class GrpcTransport:
    """Synchronous transport over a gRPC channel (plaintext unless ``credentials`` given)."""

    def __init__(self, target: str, api_key: str, *, timeout: float = 30.0,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        self._channel = (grpc.secure_channel(target, credentials) if credentials
                         else grpc.insecure_channel(target))
        self._tools = pb_grpc.ToolGatewayStub(self._channel)
        self._approvals = pb_grpc.ApprovalsStub(self._channel)
        self._metadata = (("x-api-key", api_key),)
        self._timeout = timeout
        self._deadlines = _Deadlines(timeout)
        self._listing = threading.Lock()
        self._closed = False

    def _opts(self, timeout: float | None = None) -> dict[str, Any]:
        return {"metadata": self._metadata, "timeout": timeout or self._timeout}

    def list_tools(self) -> list[ToolSpec]:
        with _translated(self):
            resp = self._tools.ListTools(pb.ListToolsRequest(), **self._opts())
        return self._deadlines.learn([tool_from_proto(t) for t in resp.tools])

    def execute(self, request: ExecuteRequest) -> ToolResult:
        if not self._deadlines.known:
            with self._listing:  # one listing for the calls that start together
                if not self._deadlines.known:
                    try:
                        self.list_tools()
                    except ToolgateClientError:  # then the call says what is wrong
                        self._deadlines.unknown()
        with _translated(self):
            resp = self._tools.ExecuteTool(request_to_proto(request), **self._opts(self._deadlines.of(request.tool)))
        return result_from_proto(request.tool, resp)

    def get_approval(self, approval_id: str) -> Approval:
        with _translated(self, approval_id):
            msg = self._approvals.Get(pb.GetApprovalRequest(approval_id=approval_id), **self._opts())
        return approval_from_proto(msg)

    def watch_approval(self, approval_id: str, *, timeout: float) -> Iterator[ApprovalEvent]:
        req = pb.WatchApprovalsRequest(approval_id=approval_id, include_current=True)
        with _translated(self, approval_id):
            for msg in self._approvals.Watch(req, **self._opts(timeout)):
                yield event_from_proto(msg)

    def close(self) -> None:
        """Close the channel; later calls raise ``ClientClosedError``. Idempotent."""
        self._closed = True
        self._channel.close()


class AsyncGrpcTransport:
    """Asyncio transport over a ``grpc.aio`` channel."""

    def __init__(self, target: str, api_key: str, *, timeout: float = 30.0,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        self._channel = (grpc.aio.secure_channel(target, credentials) if credentials
                         else grpc.aio.insecure_channel(target))
        self._tools = pb_grpc.ToolGatewayStub(self._channel)
        self._approvals = pb_grpc.ApprovalsStub(self._channel)
        self._metadata = (("x-api-key", api_key),)
        self._timeout = timeout
        self._deadlines = _Deadlines(timeout)
        self._listing = asyncio.Lock()
        self._closed = False

    def _opts(self, timeout: float | None = None) -> dict[str, Any]:
        return {"metadata": self._metadata, "timeout": timeout or self._timeout}

    async def list_tools(self) -> list[ToolSpec]:
        async with _atranslated(self):
            resp = await self._tools.ListTools(pb.ListToolsRequest(), **self._opts())
        return self._deadlines.learn([tool_from_proto(t) for t in resp.tools])

    async def execute(self, request: ExecuteRequest) -> ToolResult:
        if not self._deadlines.known:
            async with self._listing:  # one listing for the calls that start together
                if not self._deadlines.known:
                    try:
                        await self.list_tools()
                    except ToolgateClientError:  # then the call says what is wrong
                        self._deadlines.unknown()
        async with _atranslated(self):
            resp = await self._tools.ExecuteTool(request_to_proto(request),
                                                 **self._opts(self._deadlines.of(request.tool)))
        return result_from_proto(request.tool, resp)

    async def get_approval(self, approval_id: str) -> Approval:
        async with _atranslated(self, approval_id):
            msg = await self._approvals.Get(
                pb.GetApprovalRequest(approval_id=approval_id), **self._opts())
        return approval_from_proto(msg)

    async def watch_approval(self, approval_id: str, *, timeout: float) -> AsyncIterator[ApprovalEvent]:
        req = pb.WatchApprovalsRequest(approval_id=approval_id, include_current=True)
        async with _atranslated(self, approval_id):
            call = self._approvals.Watch(req, **self._opts(timeout))
            try:
                async for msg in call:
                    yield event_from_proto(msg)
            finally:
                call.cancel()

    async def close(self) -> None:
        """Close the channel; later calls raise ``ClientClosedError``. Idempotent."""
        self._closed = True
        await self._channel.close()
