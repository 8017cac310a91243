"""What ``decide`` may return, and the strict reading of it.

``Answer | ToolCall | ToolCalls | AskHuman | Stop``. A sequence of ``ToolCall`` is read as
``ToolCalls``. Plain dicts are accepted in one shape: ``{"type": "answer", "text": ...}``,
``{"type": "tool", "name": ..., "input": {...}}``, ``{"type": "ask_human", "question": ...}``,
``{"type": "stop", "reason": ...}``. Anything else is an invalid decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from runtime_client._state import StopReason


@dataclass(frozen=True, slots=True)
class Answer:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """Several calls in one decision: reads run in parallel, writes one at a time in order."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class AskHuman:
    question: str


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str


Decision = Union[Answer, ToolCall, ToolCalls, AskHuman, Stop]


class InvalidDecision(Exception):
    """Internal: raised by ``parse_decision``; the loop turns it into stop ``invalid_decision``."""


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise InvalidDecision(message)


def _check_call(call: ToolCall) -> ToolCall:
    _need(isinstance(call.name, str) and bool(call.name), "tool call needs a non-empty name")
    _need(isinstance(call.input, dict), "tool input must be a JSON object")
    return call


def _from_dict(raw: Mapping[str, Any]) -> Decision:
    kind = raw.get("type")
    shapes = {"answer": ({"text"}, Answer), "tool": ({"name", "input"}, ToolCall),
              "ask_human": ({"question"}, AskHuman), "stop": ({"reason"}, Stop)}
    _need(kind in shapes, f"unknown decision type {kind!r}")
    keys, cls = shapes[kind]
    _need(set(raw) == keys | {"type"}, f"{kind} decision must have exactly {sorted(keys)}")
    return parse_decision(cls(**{k: raw[k] for k in keys}))


def parse_decision(raw: Any) -> Decision:
    """Read ``raw`` strictly as one decision or raise ``InvalidDecision``."""
    if isinstance(raw, Answer):
        _need(isinstance(raw.text, str), "answer text must be a string")
        return raw
    if isinstance(raw, ToolCall):
        return _check_call(raw)
    if isinstance(raw, ToolCalls):
        _need(len(raw.calls) > 0, "empty tool call list")
        _need(all(isinstance(c, ToolCall) for c in raw.calls), "ToolCalls holds only ToolCall")
        return ToolCalls(tuple(_check_call(c) for c in raw.calls))
    if isinstance(raw, AskHuman):
        _need(isinstance(raw.question, str) and bool(raw.question), "question must be a string")
        return raw
    if isinstance(raw, Stop):
        _need(raw.reason in StopReason.__members__.values(), f"unknown stop reason {raw.reason!r}")
        return raw
    if isinstance(raw, Mapping):
        return _from_dict(raw)
    if isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        calls = tuple(parse_decision(c) for c in raw)
        _need(all(isinstance(c, ToolCall) for c in calls), "a list decision holds only tool calls")
        return parse_decision(ToolCalls(calls))  # type: ignore[arg-type]
    raise InvalidDecision(f"not a decision: {type(raw).__name__}")
