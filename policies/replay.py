"""Replay audited policy inputs against a candidate bundle.

The audit log holds, for every decision whose audit level was ``full``, the exact policy
input (``policy_input``) beside the decision the enforced policy made. Replaying those
inputs through a candidate bundle shows which calls a policy change would decide
differently, before it is enforced. Records without ``policy_input`` (audit ``minimal``)
cannot be replayed and are counted as skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from gateway.audit import iter_steps  # leaf modules: the log format, nothing of the gateway
from gateway.terminal import shown

from policies._errors import PolicyError
from policies.embedded import EmbeddedEngine


class ReplayError(Exception):
    """Raised when the audit file cannot be read (``code`` ``audit_unreadable``) or a line is
    not a JSON object (``audit_malformed``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Change:
    """One audited call the candidate decides differently."""

    decision_id: str
    tool: str
    old: str
    new: str
    """The candidate's decision, or ``error:<code>`` when it could not decide (which denies)."""


@dataclass(slots=True)
class ReplayReport:
    """What a replay found."""

    replayed: int = 0
    """Policy records with a policy_input, re-evaluated."""
    skipped: int = 0
    """Policy records without a policy_input (audit level minimal)."""
    changes: list[Change] = field(default_factory=list)
    candidate_version: str = ""


def replay_records(records: list[dict[str, Any]], engine: EmbeddedEngine) -> ReplayReport:
    """Re-evaluate every replayable policy record with ``engine``; never raises PolicyError."""
    report = ReplayReport(candidate_version=engine.version)
    for record in iter_steps(records):  # a call's steps, or older one-record-per-step logs
        if record.get("stage") != "policy":
            continue
        policy_input = record.get("policy_input")
        if not isinstance(policy_input, dict):
            report.skipped += 1
            continue
        report.replayed += 1
        try:
            new = engine.evaluate_sync(policy_input).decision
        except PolicyError as exc:
            new = f"error:{exc.code}"
        old = str(record.get("decision", record.get("code", "")))
        if new != old:
            tool = record.get("tool") or (policy_input.get("tool") or {}).get("name", "")
            report.changes.append(Change(str(record.get("decision_id", "")), str(tool), old, new))
    return report


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The records of an audit log (JSON lines; blank lines ignored).

    Raises ``ReplayError`` naming the line when a line is not a JSON object.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ReplayError("audit_unreadable", f"{path}: cannot read: {exc}") from exc
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayError("audit_malformed", f"{path}:{number}: not JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise ReplayError("audit_malformed", f"{path}:{number}: not a JSON object")
        records.append(record)
    return records


def replay_file(audit: Path | Sequence[Path], policy: Path) -> ReplayReport:
    """Replay the audit log at ``audit`` (or the records of several: rotated files, workers' logs)
    against the bundle at ``policy``.

    Raises ``ReplayError`` for an unreadable audit log and ``PolicyLoadError`` for a
    bundle that does not load.
    """
    engine = EmbeddedEngine.from_bundle(policy)
    files = [audit] if isinstance(audit, (str, Path)) else list(audit)
    return replay_records([record for path in files for record in read_audit(path)], engine)


def format_report(report: ReplayReport) -> str:
    """A table of changed decisions and a summary line. Every field came from the audit log (or
    the candidate bundle), written by whoever could reach the gateway: control and format
    characters are escaped (``gateway.terminal.shown``), so a record cannot draw on the terminal."""
    lines = []
    if report.changes:
        rows = [("DECISION_ID", "TOOL", "OLD", "NEW")] + [
            (shown(c.decision_id), shown(c.tool), shown(c.old), shown(c.new)) for c in report.changes
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for decision_id, tool, old, new in rows:
            arrow = "->" if decision_id != "DECISION_ID" else "  "
            lines.append(f"{decision_id:<{widths[0]}}  {tool:<{widths[1]}}  {old:<{widths[2]}} {arrow} {new}")
        lines.append("")
    lines.append(
        f"{len(report.changes)} of {report.replayed} replayed decisions change under {shown(report.candidate_version)}"
        f" ({report.skipped} policy records without policy_input skipped)"
    )
    return "\n".join(lines)
