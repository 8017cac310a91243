"""Stable snake_case outcome codes.

The same code labels the response, the audit record, the metric and the tests. Codes are
part of the wire contract: add new ones, never rename.
"""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    OK = "ok"
    # admission, resolve + arguments
    PERMISSION_DENIED = "permission_denied"  # the key may not call tools (no agent role)
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    INVALID_EVIDENCE = "invalid_evidence"
    # idempotency
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    EXECUTION_IN_PROGRESS = "execution_in_progress"
    OUTCOME_UNKNOWN = "outcome_unknown"  # the first execution's holder died mid-call: retry with a new key
    # policy
    POLICY_DENIED = "policy_denied"
    POLICY_UNAVAILABLE = "policy_unavailable"
    POLICY_INVALID_DECISION = "policy_invalid_decision"
    EVIDENCE_REQUIRED = "evidence_required"
    # approvals
    APPROVAL_REQUIRED = "approval_required"
    INVALID_APPROVAL = "invalid_approval"
    APPROVAL_ARGS_MISMATCH = "approval_args_mismatch"
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_REPLAYED = "approval_replayed"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_PENDING = "approval_pending"
    APPROVAL_LIFETIME_OUT_OF_RANGE = "approval_lifetime_out_of_range"  # an approver's token: exp - iat out of bounds
    REJECTION_REASON_TOO_LONG = "rejection_reason_too_long"  # a rejection's reason past its bound
    # credentials + execution
    CREDENTIAL_UNAVAILABLE = "credential_unavailable"
    EGRESS_DENIED = "egress_denied"
    RATE_LIMITED = "rate_limited"
    CONCURRENCY_LIMITED = "concurrency_limited"
    TOOL_TIMEOUT = "tool_timeout"
    TOOL_ERROR = "tool_error"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"
    # refusals at the gRPC edge, answered with a gRPC status (these codes label their audit records)
    UNAUTHENTICATED = "unauthenticated"  # no key, or one no identity has: UNAUTHENTICATED
    UNKNOWN_METHOD = "unknown_method"  # a method no service has: UNIMPLEMENTED
