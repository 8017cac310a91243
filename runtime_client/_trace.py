"""Trace events: one record per stage of a step (context_built, decision, policy_decision,
tool_result, stop), each with run id, step and timestamps."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TRACE_EVENT_TYPES = ("context_built", "decision", "policy_decision", "tool_result", "stop")


@dataclass(frozen=True, slots=True)
class TraceEvent:
    type: str
    run_id: str
    step: int
    started_at: float
    ended_at: float
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        return (self.ended_at - self.started_at) * 1000


class Tracer:
    """Collects trace events; ``sink`` (optional) sees each one as it happens."""

    def __init__(self, sink: Callable[[TraceEvent], None] | None = None) -> None:
        self.events: list[TraceEvent] = []
        self._sink = sink

    def emit(self, type: str, run_id: str, step: int, started_at: float | None = None,
             **data: Any) -> TraceEvent:
        if type not in TRACE_EVENT_TYPES:
            raise ValueError(f"unknown trace event type {type!r}")
        now = time.time()
        event = TraceEvent(type, run_id, step, started_at or now, now, data)
        self.events.append(event)
        if self._sink is not None:
            self._sink(event)
        return event

    def types(self) -> list[str]:
        return [e.type for e in self.events]
