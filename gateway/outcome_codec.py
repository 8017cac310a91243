"""CallResult ⇄ JSON, for outcomes stored under idempotency keys and consumed grants."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from gateway.codes import Code
from gateway.json_encode import encoder
from gateway.models import (
    ApprovalRequired,
    CallResult,
    ErrorInfo,
    EvidenceRequired,
    FieldError,
    Observation,
    Outcome,
    Provenance,
    Refused,
    outcome_kind,
)


_encode = encoder(separators=(",", ":"), default=str)


def dumps(result: CallResult) -> str:
    return _encode(
        {
            "decision_id": result.decision_id,
            "args_hash": result.args_hash,
            "policy_version": result.policy_version,
            "kind": outcome_kind(result.outcome),
            "outcome": _outcome_dict(result.outcome),
        }
    )


def loads(text: str) -> CallResult:
    raw = json.loads(text)
    return CallResult(
        decision_id=raw["decision_id"],
        args_hash=raw["args_hash"],
        policy_version=raw["policy_version"],
        outcome=_outcome_from(raw["kind"], raw["outcome"]),
    )


def _outcome_dict(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Observation):
        return {
            "status": outcome.status,
            "summary": outcome.summary,
            "data": outcome.data,
            "provenance": _slots(outcome.provenance),
            "truncated": outcome.truncated,
            "error": _slots(outcome.error) if outcome.error else None,
            "duration_ms": outcome.duration_ms,
            "attempts": outcome.attempts,
            "redactions": outcome.redactions,
            "flags": list(outcome.flags),
            "code": str(outcome.code),
        }
    if isinstance(outcome, Refused):
        return {
            "code": str(outcome.code),
            "reasons": list(outcome.reasons),
            "field_errors": [_slots(e) for e in outcome.field_errors],
            "retry_after_seconds": outcome.retry_after_seconds,
        }
    if isinstance(outcome, ApprovalRequired):
        return {**_slots(outcome), "expires_at": outcome.expires_at.isoformat(), "code": str(outcome.code)}
    return {"missing": list(outcome.missing), "reasons": list(outcome.reasons)}


def _outcome_from(kind: str, d: dict[str, Any]) -> Outcome:
    if kind == "observation":
        return Observation(
            status=d["status"],
            summary=d["summary"],
            data=d["data"],
            provenance=Provenance(**d["provenance"]),
            truncated=d["truncated"],
            error=ErrorInfo(**d["error"]) if d["error"] else None,
            duration_ms=d["duration_ms"],
            attempts=d["attempts"],
            redactions=d["redactions"],
            flags=tuple(d["flags"]),
            code=Code(d["code"]),
        )
    if kind == "refused":
        return Refused(
            code=Code(d["code"]),
            reasons=tuple(d["reasons"]),
            field_errors=tuple(FieldError(**e) for e in d["field_errors"]),
            retry_after_seconds=d["retry_after_seconds"],
        )
    if kind == "approval_required":
        return ApprovalRequired(
            approval_id=d["approval_id"],
            expires_at=datetime.fromisoformat(d["expires_at"]),
            reasons=tuple(d["reasons"]),
            approver_groups=tuple(d["approver_groups"]),
            quorum=d["quorum"],
            approvers=tuple(d["approvers"]),
        )
    return EvidenceRequired(missing=tuple(d["missing"]), reasons=tuple(d["reasons"]))


def _slots(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}
