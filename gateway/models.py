"""Domain types of the call path. No protobuf here: the servicer converts at the edge.

Outcomes of a call are one of four frozen types (``Observation``, ``Refused``,
``ApprovalRequired``, ``EvidenceRequired``) wrapped in a ``CallResult`` that carries the
decision id, args hash and policy version.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Union

from gateway.codes import Code

MAX_APPROVAL_ID = 128
APPROVAL_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_APPROVAL_ID}}}")
"""What an approval id may be, wherever a caller names one (a call, an Approvals method): the
ids the service makes are UUIDs, so anything else (a control character, a space) is a mistake."""
APPROVAL_ID_RULE = f"must be 1 to {MAX_APPROVAL_ID} printable ASCII characters, with no spaces"


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller. Tenant and agent come only from here, never from a request."""

    tenant: str
    agent: str
    user: str = ""
    roles: frozenset[str] = frozenset({"agent"})

    @property
    def principal(self) -> str:
        return self.user or self.agent


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call as the agent asked for it, before any validation."""

    tool: str
    args_json: bytes
    run_id: str = ""
    step: int = 0
    idempotency_key: str = ""
    evidence_json: bytes = b""
    approval_grant: str = ""
    approval_id: str = ""


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    type: str
    message: str
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class Provenance:
    tool: str
    tool_version: str
    args_hash: str
    decision_id: str
    approval_id: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """What a tool produced, normalized. Always untrusted data, never instructions."""

    status: Literal["ok", "error"]
    summary: str
    data: Any
    provenance: Provenance
    truncated: bool = False
    error: ErrorInfo | None = None
    duration_ms: int = 0
    attempts: int = 1
    redactions: int = 0
    flags: tuple[str, ...] = ()
    trust: Literal["untrusted"] = "untrusted"
    code: Code = Code.OK


@dataclass(frozen=True, slots=True)
class Refused:
    code: Code
    reasons: tuple[str, ...] = ()
    field_errors: tuple[FieldError, ...] = ()
    retry_after_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    approval_id: str
    expires_at: datetime
    reasons: tuple[str, ...] = ()
    approver_groups: tuple[str, ...] = ()
    quorum: int = 1
    approvers: tuple[str, ...] = ()
    code: Code = Code.APPROVAL_REQUIRED


@dataclass(frozen=True, slots=True)
class EvidenceRequired:
    missing: tuple[str, ...]
    reasons: tuple[str, ...] = ()
    code: Code = Code.EVIDENCE_REQUIRED


Outcome = Union[Observation, Refused, ApprovalRequired, EvidenceRequired]


@dataclass(frozen=True, slots=True)
class CallResult:
    decision_id: str
    outcome: Outcome
    args_hash: str = ""
    policy_version: str = ""
    replayed: bool = False

    @property
    def code(self) -> Code:
        return self.outcome.code

    def as_replay(self) -> "CallResult":
        return dataclasses.replace(self, replayed=True)


def outcome_kind(outcome: Outcome) -> str:
    """The wire name of an outcome: observation | refused | approval_required | evidence_required."""
    return _KIND[type(outcome)]


_KIND = {
    Observation: "observation",
    Refused: "refused",
    ApprovalRequired: "approval_required",
    EvidenceRequired: "evidence_required",
}


def new_decision_id() -> str:
    """A random (version 4) UUID's text, as ``str(uuid.uuid4())`` writes it: 122 random bits from
    ``os.urandom``, in a fifth of the time (one per call; the ``uuid.UUID`` object is never needed)."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}
"""The first digit of the fourth group: its two high bits are RFC 4122's variant (10)."""


@dataclass(slots=True)
class CallContext:
    """Everything the pipeline learns about one call as it moves through the stages."""

    decision_id: str
    identity: Identity
    call: ToolCall
    started: float
    tool: Any = None  # gateway.tools.ToolDescriptor once resolved
    args: dict[str, Any] | None = None
    args_hash: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    decision: Any = None  # policies.PolicyDecision once decided
    approval: Any = None  # gateway.approvals.VerifiedApproval once verified
    credentials: Any = None  # gateway.credentials.ResolvedCredentials once resolved
    policy_version: str = ""
