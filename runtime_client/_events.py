"""The event log: every state transition of a run, from which the final state can be rebuilt.

The loop changes ``AgentState`` only through ``EventLog.record``, which applies the same
``apply`` function ``replay`` uses, so live state and replayed state cannot drift apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from runtime_client._state import AgentState, Message, PendingApproval, StepObservation, StopReason


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    type: str
    data: dict[str, Any]
    at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "data": self.data, "at": self.at}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Event:
        return cls(raw["seq"], raw["type"], raw["data"], raw.get("at", 0.0))


def _started(state: AgentState, data: dict[str, Any]) -> AgentState:
    return AgentState.model_validate(data["state"])


def _step(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.steps = data["step"]
    return state


def _observation(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.observations.append(StepObservation.model_validate(data))
    return state


def _message(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.messages.append(Message.model_validate(data))
    return state


def _tool_called(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.tools_called.append(data["tool"])
    return state


def _pending(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.pending_approvals.append(PendingApproval.model_validate(data))
    return state


def _resolved(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.pending_approvals = [p for p in state.pending_approvals
                               if p.approval_id != data["approval_id"]]
    return state


def _answered(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.answer = data["text"]
    return state


def _stopped(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.stop_reason = StopReason(data["reason"])
    return state


def _resumed(state: AgentState, data: dict[str, Any]) -> AgentState:
    state.stop_reason = None
    return state


_APPLY: dict[str, Callable[[AgentState, dict[str, Any]], AgentState]] = {
    "run_started": _started, "step_started": _step, "observation_recorded": _observation,
    "message_added": _message, "tool_called": _tool_called, "approval_pending": _pending,
    "approval_resolved": _resolved, "answered": _answered, "stopped": _stopped,
    "resumed": _resumed,
}


def apply(state: AgentState | None, event: Event) -> AgentState:
    """Apply one event; ``state`` may be None only for ``run_started``."""
    if event.type not in _APPLY:
        raise ValueError(f"unknown event type {event.type!r}")
    if state is None and event.type != "run_started":
        raise ValueError("an event log must begin with run_started")
    return _APPLY[event.type](state, event.data)  # type: ignore[arg-type]


def replay(events: list[Event] | tuple[Event, ...]) -> AgentState:
    """Rebuild a run's state from its event log."""
    state: AgentState | None = None
    for event in events:
        state = apply(state, event)
    if state is None:
        raise ValueError("empty event log")
    return state


@dataclass
class EventLog:
    """Records transitions on a live state. ``events`` is the append-only log."""

    state: AgentState
    events: list[Event] = field(default_factory=list)

    def record(self, type: str, **data: Any) -> None:
        event = Event(len(self.events) + 1, type, data, time.time())
        self.state = apply(self.state, event)
        self.events.append(event)

    @classmethod
    def start(cls, state: AgentState) -> EventLog:
        log = cls(state.model_copy(deep=True))
        log.record("run_started", state=state.model_dump(mode="json"))
        return log
