"""Turning a gateway ToolResult into the text a framework shows its model or user."""

from __future__ import annotations

import json
from dataclasses import dataclass

from runtime_client._context import label_untrusted, render_tool_output
from runtime_client._types import ApprovalRequired, EvidenceRequired, Observation, Refused, ToolResult

MAX_TEXT = 16_000


@dataclass(frozen=True, slots=True)
class CallText:
    is_error: bool
    text: str
    code: str


def call_text(result: ToolResult) -> CallText:
    o = result.outcome
    if isinstance(o, Observation):
        if o.ok:
            return CallText(False, label_untrusted(result.tool, render_tool_output(o.data), MAX_TEXT), "ok")
        message = o.error.message if o.error else o.summary  # carries the tool's stderr: untrusted
        return CallText(True, f"tool {result.tool} failed:\n"
                        + label_untrusted(result.tool, message, MAX_TEXT), result.code or "tool_error")
    if isinstance(o, Refused):
        reasons = "; ".join(o.reasons) or "no reason given"
        fields = "".join(f"\n  {e.path or '/'}: {e.message}" for e in o.field_errors)
        return CallText(True, f"refused ({o.code}): {reasons}{fields}", o.code)
    if isinstance(o, ApprovalRequired):
        who = ", ".join(o.approver_groups) or "an approver"
        return CallText(True, f"approval required (approval_id={o.approval_id}): waiting for {who}. "
                        f"The call was NOT executed; retry after approval. "
                        f"Reasons: {'; '.join(o.reasons) or '-'}", "approval_required")
    if isinstance(o, EvidenceRequired):
        return CallText(True, f"more evidence required: {json.dumps(list(o.missing))}", "evidence_required")
    raise TypeError(f"unknown outcome {type(o).__name__}")
