"""Find records in audit logs: the calls of one agent, one decision's whole trail, every
refusal with a given code, a time window.

Reads one or more logs (a worker's or replica's each) and yields matching records in time
order, merged across files, as they are stored (``steps`` and chain fields included). A call's
caller (tenant, agent, user) is in the ``authenticate`` step of its first record; the call's
later records (its ``result`` after an ``authorized``) match through their ``decision_id``.
Memory grows with the calls that match, not with the log. Lines that are not JSON records are
skipped and listed (``Search.skipped``): searching is not verifying (``gateway.audit_verify.verify_file``).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

_CALLER = ("tenant", "agent", "user")


@dataclass(frozen=True)
class Criteria:
    """Every given field must match (empty: any)."""

    decision_id: str = ""
    tool: str = ""
    code: str = ""
    """The record's code or one of its steps' codes."""
    tenant: str = ""
    agent: str = ""
    user: str = ""
    since: float | None = None
    until: float | None = None

    def __post_init__(self) -> None:
        for name in ("since", "until"):  # nan compares false with every ts: it would match all
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"Criteria.{name} must be a finite time, not {value!r}")

    @property
    def by_caller(self) -> bool:
        return bool(self.tenant or self.agent or self.user)


@dataclass
class Search:
    criteria: Criteria
    read: int = 0
    matched: int = 0
    skipped: list[str] = field(default_factory=list)  # "file:line" of lines that are not records
    _calls: set[str] = field(default_factory=set)  # decision ids of calls whose caller matched

    def run(self, paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
        streams = [self._records(Path(p)) for p in paths]
        for _, _, record in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
            self.read += 1
            if self._matches(record):
                self.matched += 1
                yield record

    def _records(self, path: Path) -> Iterator[tuple[float, int, dict[str, Any]]]:
        try:
            with open(path, "rb") as f:
                for lineno, raw in enumerate(f, start=1):
                    ts, record = _timed(raw)
                    if record is None:
                        self.skipped.append(f"{path}:{lineno}")
                        continue
                    yield ts, lineno, record
        except OSError as exc:
            raise Unreadable(f"{path} cannot be read: {exc.strerror or exc}") from None

    def _matches(self, record: dict[str, Any]) -> bool:
        c = self.criteria
        steps = record.get("steps")
        steps = [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []
        if c.by_caller and not self._caller_matches(record, steps):  # first: it remembers the call for later
            return False
        if c.since is not None and record["ts"] < c.since or c.until is not None and record["ts"] > c.until:
            return False
        if c.decision_id and record.get("decision_id") != c.decision_id:
            return False
        if c.tool and record.get("tool") != c.tool:
            return False
        return not c.code or record.get("code") == c.code or any(s.get("code") == c.code for s in steps)

    def _caller_matches(self, record: dict[str, Any], steps: list[dict[str, Any]]) -> bool:
        c = self.criteria
        wants = tuple(zip(_CALLER, (c.tenant, c.agent, c.user)))
        decision_id = str(record.get("decision_id") or "")
        auth = next((s for s in steps if s.get("stage") == "authenticate"), None)
        if auth is not None:  # a call's first record: its later ones match through the decision id
            ok = all(not want or auth.get(key) == want for key, want in wants)
            if ok and decision_id:
                self._calls.add(decision_id)
            return ok
        if decision_id in self._calls:
            return True
        # a record of its own (an approval event, a refused key): judged on what it carries
        return all(not want or record.get(key) == want for key, want in wants)


class Unreadable(Exception):
    """A file given to search cannot be read (its message says which, and why)."""


def _timed(raw: bytes) -> tuple[float, dict[str, Any] | None]:
    """A line's record and its time, or (0, None) when it is not a record: no JSON object, or no
    ``ts`` that is a finite time (a 400-digit one is too large for one)."""
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        return 0.0, None
    ts = record.get("ts") if isinstance(record, dict) else None
    if not isinstance(ts, (int, float)):
        return 0.0, None
    try:
        ts = float(ts)
    except OverflowError:
        return 0.0, None
    return (ts, record) if math.isfinite(ts) else (0.0, None)
