"""FakeGateway: a scripted, in-memory gateway for tests (like httpx's MockTransport).

It keeps the gateway's observable contract: policy outcomes in-band, approvals bound to
the args hash, single-use grants whose replay returns the stored outcome, idempotency keys,
and a Watch stream. It is not a security boundary.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from gateway.arguments import SchemaValidator, args_hash  # the gateway's: RFC 8785, as approvals bind to

from runtime_client._errors import ApprovalNotFoundError, GatewayTimeoutError, TransportError
from runtime_client._types import (
    Approval, ApprovalEvent, ApprovalRequired, EvidenceRequired, ExecuteRequest, Observation,
    Provenance, Refused, Risk, ToolResult, ToolSpec, FieldError, ErrorInfo,
)

Policy = str | Callable[[dict[str, Any]], str]
""""allow" | "deny" | "approval" | "evidence", or a function of the args returning one."""


@dataclass
class _Tool:
    spec: ToolSpec
    handler: Callable[..., Any]
    policy: Policy
    delay: float
    groups: tuple[str, ...]
    validator: SchemaValidator


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """A call the fake actually ran, with wall-clock start and end (for overlap tests)."""

    tool: str
    args: dict[str, Any]
    run_id: str
    step: int
    approval_id: str
    started: float
    ended: float


@dataclass
class _Ticket:
    tool: _Tool
    request: ExecuteRequest
    digest: str
    approval_id: str = ""
    grant: str = ""
    decision_id: str = ""


def _echo(**args: Any) -> Any:
    return args


class FakeGateway:
    """Register tools with ``add_tool``; hand ``client()`` / ``async_client()`` to code under test."""

    def __init__(self, *, tenant: str = "acme", agent: str = "agent") -> None:
        self.tenant, self.agent = tenant, agent
        self.executed: list[ExecutedCall] = []
        self.requests: list[ExecuteRequest] = []
        self.unavailable = False
        self._tools: dict[str, _Tool] = {}
        self._approvals: dict[str, Approval] = {}
        self._grants: dict[str, str] = {}
        self._consumed: dict[str, ToolResult] = {}
        self._idem: dict[tuple[str, str], tuple[str, ToolResult]] = {}
        self._watchers: list[tuple[str, Callable[[ApprovalEvent], None]]] = []
        self._ids = itertools.count(1)
        self._lock = threading.RLock()

    # ------------------------------------------------------------ scripting

    def add_tool(self, name: str, handler: Callable[..., Any] | None = None, *,
                 side_effect: str = "read", description: str = "",
                 schema: dict[str, Any] | None = None, policy: Policy = "allow",
                 delay: float = 0.0, approver_groups: tuple[str, ...] = ("ops",)) -> ToolSpec:
        """Register a tool. ``handler(**args)`` (sync or async) returns JSON data. Its schema is
        compiled as the gateway compiles a tool's (``gateway.arguments.SchemaValidator``): one the
        gateway would not load is a ValueError here too."""
        spec = ToolSpec(name=name, description=description or f"fake tool {name}",
                        input_schema=schema or {"type": "object"}, risk=Risk(side_effect),
                        version="1")
        try:
            validator = SchemaValidator.compile(spec.input_schema)
        except ValueError as exc:
            raise ValueError(f"tool {name!r}: {exc}") from None
        self._tools[name] = _Tool(spec, handler or _echo, policy, delay, approver_groups, validator)
        return spec

    def remove_tool(self, name: str) -> None:
        """Unregister a tool: later calls to it are refused ``unknown_tool``."""
        del self._tools[name]

    def executions(self, tool: str | None = None) -> list[ExecutedCall]:
        return [c for c in self.executed if tool is None or c.tool == tool]

    def approvals(self, status: str | None = None) -> list[Approval]:
        return [a for a in self._approvals.values() if status is None or a.status == status]

    def approve(self, approval_id: str, *, approver: str = "alice") -> Approval:
        """Approve (quorum 1) and issue a single-use grant for the requesting agent."""
        grant = f"fake-grant.{approval_id}.{next(self._ids)}"
        with self._lock:
            self._grants[grant] = approval_id
            approval = self._update(approval_id, status="approved", approvers=(approver,), grant=grant)
        self._emit("granted", approval)
        return approval

    def reject(self, approval_id: str, *, reason: str = "rejected") -> Approval:
        with self._lock:
            approval = self._update(approval_id, status="rejected", rejection_reason=reason)
        self._emit("rejected", approval)
        return approval

    def client(self) -> Any:
        from runtime_client._client import GatewayClient

        return GatewayClient(transport=FakeTransport(self))

    def async_client(self) -> Any:
        from runtime_client._client import AsyncGatewayClient

        return AsyncGatewayClient(transport=AsyncFakeTransport(self))

    # ------------------------------------------------------------ gateway behaviour

    def list_tools(self) -> list[ToolSpec]:
        self._check_up()
        return [t.spec for t in self._tools.values()]

    def get_approval(self, approval_id: str) -> Approval:
        self._check_up()
        try:
            return self._approvals[approval_id]
        except KeyError:
            raise ApprovalNotFoundError(f"gateway NOT_FOUND: {approval_id}",
                                        approval_id=approval_id) from None

    def prepare(self, req: ExecuteRequest) -> ToolResult | _Ticket:
        """Everything before execution; returns a final result or a ticket to run."""
        self._check_up()
        with self._lock:
            self.requests.append(req)
            tool = self._tools.get(req.tool)
            if tool is None:
                return self._refuse(req, "unknown_tool", f"no tool named {req.tool!r}")
            digest = args_hash(req.args)
            errors = tool.validator.errors(req.args)
            if errors:
                fields = tuple(FieldError(e.path, e.message) for e in errors)
                return replace(self._refuse(req, "invalid_arguments", "arguments do not match schema"),
                               outcome=Refused("invalid_arguments", ("schema",), fields))
            stored = self._idem.get((req.tool, req.idempotency_key)) if req.idempotency_key else None
            if stored is not None:
                if stored[0] != digest:
                    return self._refuse(req, "idempotency_key_reused", "key used with other args")
                return replace(stored[1], replayed=True)
            if req.approval_grant or req.approval_id:
                return self._redeem(tool, req, digest)
            return self._decide(tool, req, digest)

    def finish(self, ticket: _Ticket, data: Any, started: float, error: str = "") -> ToolResult:
        req = ticket.request
        with self._lock:
            self.executed.append(ExecutedCall(req.tool, req.args, req.run_id, req.step,
                                              ticket.approval_id, started, time.monotonic()))
            prov = Provenance(req.tool, "1", ticket.digest, ticket.decision_id, ticket.approval_id)
            obs = (Observation("error", f"{req.tool} failed", None, error=ErrorInfo("tool_error", error),
                               provenance=prov) if error
                   else Observation("ok", f"{req.tool} ok", data, provenance=prov))
            result = ToolResult(req.tool, obs, "ok" if not error else "tool_error",
                                ticket.decision_id, ticket.digest, "fake-1")
            if req.idempotency_key:
                self._idem[(req.tool, req.idempotency_key)] = (ticket.digest, result)
            if ticket.grant:
                self._consumed[ticket.grant] = result
                approval = self._update(ticket.approval_id, status="executed")
        if ticket.grant:
            self._emit("executed", approval)
        return result

    async def aexecute(self, req: ExecuteRequest) -> ToolResult:
        ticket = self.prepare(req)
        if isinstance(ticket, ToolResult):
            return ticket
        started = time.monotonic()
        try:
            if ticket.tool.delay:
                await asyncio.sleep(ticket.tool.delay)  # simulates a slow tool, not a wait for state
            data = ticket.tool.handler(**req.args)
            if inspect.isawaitable(data):
                data = await data
        except Exception as exc:  # a tool failure is an observation, not an exception
            return self.finish(ticket, None, started, error=str(exc) or type(exc).__name__)
        return self.finish(ticket, data, started)

    def execute(self, req: ExecuteRequest) -> ToolResult:
        ticket = self.prepare(req)
        if isinstance(ticket, ToolResult):
            return ticket
        started = time.monotonic()
        try:
            if ticket.tool.delay:
                time.sleep(ticket.tool.delay)  # simulates a slow tool, not a wait for state
            data = ticket.tool.handler(**req.args)
            if inspect.isawaitable(data):
                data = asyncio.run(data)
        except Exception as exc:
            return self.finish(ticket, None, started, error=str(exc) or type(exc).__name__)
        return self.finish(ticket, data, started)

    def subscribe(self, approval_id: str, sink: Callable[[ApprovalEvent], None]) -> Callable[[], None]:
        entry = (approval_id, sink)
        with self._lock:
            self._watchers.append(entry)
            current = self._approvals.get(approval_id)
        if current is not None:
            sink(ApprovalEvent("current", current))
        return lambda: self._watchers.remove(entry)

    # ------------------------------------------------------------ internals

    def _check_up(self) -> None:
        if self.unavailable:
            raise TransportError("gateway UNAVAILABLE: fake gateway is down", status="UNAVAILABLE")

    def _decision_id(self) -> str:
        return f"dec-{next(self._ids)}"

    def _refuse(self, req: ExecuteRequest, code: str, reason: str) -> ToolResult:
        return ToolResult(req.tool, Refused(code, (reason,)), code, self._decision_id(),
                          args_hash(req.args) if isinstance(req.args, dict) else "", "fake-1")

    def _decide(self, tool: _Tool, req: ExecuteRequest, digest: str) -> ToolResult | _Ticket:
        verdict = tool.policy(req.args) if callable(tool.policy) else tool.policy
        if verdict == "allow":
            return _Ticket(tool, req, digest, decision_id=self._decision_id())
        if verdict == "deny":
            return self._refuse(req, "policy_denied", f"policy denies {req.tool}")
        if verdict == "evidence":
            return ToolResult(req.tool, EvidenceRequired(("ticket_id",), ("need a ticket",)),
                              "evidence_required", self._decision_id(), digest)
        if verdict != "approval":
            raise ValueError(f"fake policy returned {verdict!r}")
        return self._request_approval(tool, req, digest)

    def _request_approval(self, tool: _Tool, req: ExecuteRequest, digest: str) -> ToolResult:
        approval_id = f"apr-{next(self._ids)}"
        decision_id = self._decision_id()
        approval = Approval(approval_id, "pending", req.tool, dict(req.args), digest, req.run_id,
                            req.step, self.tenant, self.agent, ("needs approval",), tool.groups,
                            decision_id=decision_id)
        self._approvals[approval_id] = approval
        self._emit("requested", approval)
        outcome = ApprovalRequired(approval_id, None, approval.reasons, tool.groups, 1, ("alice",))
        return ToolResult(req.tool, outcome, "approval_required", decision_id, digest, "fake-1")

    def _redeem(self, tool: _Tool, req: ExecuteRequest, digest: str) -> ToolResult | _Ticket:
        grant = req.approval_grant
        if not grant:
            named = self._approvals.get(req.approval_id, Approval("", ""))
            if named.status in ("pending", "rejected"):  # as the gateway answers an id retry
                return self._refuse(req, f"approval_{named.status}",
                                    f"approval {named.approval_id} is {named.status}")
            grant = named.grant
        approval_id = self._grants.get(grant, "")
        approval = self._approvals.get(approval_id)
        if approval is None or approval.tool != req.tool:
            return self._refuse(req, "invalid_approval", "invalid approval")
        if approval.args_hash != digest:
            return self._refuse(req, "approval_args_mismatch", "arguments changed since approval")
        if grant in self._consumed:
            return replace(self._consumed[grant], replayed=True)
        return _Ticket(tool, req, digest, approval_id, grant, self._decision_id())

    def _update(self, approval_id: str, **changes: Any) -> Approval:
        approval = replace(self._approvals[approval_id], **changes)
        self._approvals[approval_id] = approval
        return approval

    def _emit(self, kind: str, approval: Approval) -> None:
        for watched, sink in list(self._watchers):
            if watched in ("", approval.approval_id):
                sink(ApprovalEvent(kind, approval))


class FakeTransport:
    """Synchronous ``Transport`` over a ``FakeGateway``."""

    def __init__(self, fake: FakeGateway) -> None:
        self.fake = fake

    def list_tools(self) -> list[ToolSpec]:
        return self.fake.list_tools()

    def execute(self, request: ExecuteRequest) -> ToolResult:
        return self.fake.execute(request)

    def get_approval(self, approval_id: str) -> Approval:
        return self.fake.get_approval(approval_id)

    def watch_approval(self, approval_id: str, *, timeout: float) -> Iterator[ApprovalEvent]:
        events: queue.Queue[ApprovalEvent] = queue.Queue()
        unsubscribe = self.fake.subscribe(approval_id, events.put)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    yield events.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise GatewayTimeoutError("watch deadline exceeded") from None
        finally:
            unsubscribe()

    def close(self) -> None:
        pass


class AsyncFakeTransport:
    """Asyncio ``AsyncTransport`` over a ``FakeGateway``."""

    def __init__(self, fake: FakeGateway) -> None:
        self.fake = fake

    async def list_tools(self) -> list[ToolSpec]:
        return self.fake.list_tools()

    async def execute(self, request: ExecuteRequest) -> ToolResult:
        return await self.fake.aexecute(request)

    async def get_approval(self, approval_id: str) -> Approval:
        return self.fake.get_approval(approval_id)

    async def watch_approval(self, approval_id: str, *, timeout: float) -> AsyncIterator[ApprovalEvent]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[ApprovalEvent] = asyncio.Queue()
        unsubscribe = self.fake.subscribe(
            approval_id, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
        try:
            while True:
                yield await events.get()
        finally:
            unsubscribe()

    async def close(self) -> None:
        pass
