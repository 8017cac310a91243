"""Normalize an executor result into an Observation: capped, typed, provenance attached."""

from __future__ import annotations

import json
from typing import Any

from gateway.codes import Code
from gateway.executors.base import ExecResult
from gateway.models import CallContext, Observation, Provenance

SUMMARY_CHARS = 200


def normalize(ctx: CallContext, result: ExecResult, duration_ms: int, max_bytes: int) -> Observation:
    data, truncated = _cap(result.data, max_bytes)
    provenance = Provenance(
        tool=ctx.tool.name,
        tool_version=ctx.tool.config.version,
        args_hash=ctx.args_hash,
        decision_id=ctx.decision_id,
        approval_id=getattr(ctx.approval, "approval_id", "") if ctx.approval else "",
    )
    if result.ok:
        return Observation(
            status="ok",
            summary=_summary(data),
            data=data,
            provenance=provenance,
            truncated=truncated,
            duration_ms=duration_ms,
            attempts=result.attempts,
        )
    error = result.error
    code = Code.TOOL_TIMEOUT if error and error.type == "timeout" else Code.TOOL_ERROR
    return Observation(
        status="error",
        summary=f"{ctx.tool.name} failed: {error.message if error else 'unknown error'}"[:SUMMARY_CHARS],
        data=data,
        provenance=provenance,
        truncated=truncated,
        error=error,
        duration_ms=duration_ms,
        attempts=result.attempts,
        code=code,
    )


def _cap(data: Any, max_bytes: int) -> tuple[Any, bool]:
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        data, text = repr(data), json.dumps(repr(data))
    if len(text.encode()) <= max_bytes:
        return data, False
    return text.encode()[:max_bytes].decode("utf-8", errors="ignore"), True


def _summary(data: Any) -> str:
    if isinstance(data, str):
        text = data
    elif isinstance(data, dict):
        text = "object with keys: " + ", ".join(list(data)[:10])
    elif isinstance(data, list):
        text = f"list of {len(data)} items"
    else:
        text = json.dumps(data, default=str)
    return text[:SUMMARY_CHARS]
