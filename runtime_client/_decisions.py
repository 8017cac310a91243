"""What ``decide`` may return, and the strict reading of it.

``Answer | ToolCall | ToolCalls | AskHuman | Stop``. A sequence of ``ToolCall`` is read as
``ToolCalls``. Plain dicts are accepted in one shape: ``{"type": "answer", "text": ...}``,
``{"type": "tool", "name": ..., "input": {...}}``, ``{"type": "ask_human", "question": ...}``,
``{"type": "stop", "reason": ...}``. Anything else is an invalid decision.

A ``Stop`` may carry only the reasons a decision can own (``DECISION_STOP_REASONS``:
``blocked``, ``refused``, ``cancelled``); the others are the runtime's to set, from what it
saw: ``success`` from an ``Answer``, ``awaiting_approval`` from the gateway, ``budget_exhausted``
from its step count, ``tool_failure`` and ``invalid_decision`` from its own checks. Tool input
must have a JSON form (string keys, finite numbers, no sets, bytes or cycles).
"""

from __future__ import annotations

import json
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
    evidence: dict[str, Any] | None = None
    """Sent with the call for the policy (``run.evidence``: the agent's untrusted hints, such as a
    ticket id), answering a ``require_more_evidence``; not part of the arguments or their hash."""


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


DECISION_STOP_REASONS = frozenset({StopReason.BLOCKED, StopReason.REFUSED, StopReason.CANCELLED})
"""Stop reasons a decision may carry; the runtime sets the others itself."""

_RUNTIME_OWNED = {
    StopReason.SUCCESS: "return Answer(text) to finish",
    StopReason.AWAITING_APPROVAL: "the runtime pauses when the gateway asks for approval",
    StopReason.BUDGET_EXHAUSTED: "the runtime counts the steps",
    StopReason.TOOL_FAILURE: "the runtime stops when a tool fails",
    StopReason.INVALID_DECISION: "the runtime judges decisions",
}


class InvalidDecision(Exception):
    """Internal: raised by ``parse_decision``; the loop turns it into stop ``invalid_decision``."""


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise InvalidDecision(message)


def _non_string_key(value: Any) -> Any:
    """A dict key anywhere in ``value`` that is not a string (json.dumps would coerce it)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            bad = [k for k in item if not isinstance(k, str)]
            if bad:
                return bad[0]
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return None


def _check_json(name: str, value: dict[str, Any], what: str = "input") -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidDecision(f"{what} of tool {name!r} is not JSON: {exc}") from None
    key = _non_string_key(value)  # after dumps: no cycles, bounded depth
    _need(key is None, f"{what} of tool {name!r} is not JSON: object key {key!r} is not a string")


def _check_call(call: ToolCall) -> ToolCall:
    _need(isinstance(call.name, str) and bool(call.name), "tool call needs a non-empty name")
    _need(isinstance(call.input, dict), "tool input must be a JSON object")
    _check_json(call.name, call.input)
    if call.evidence is not None:
        _need(isinstance(call.evidence, dict), "tool evidence must be a JSON object")
        _check_json(call.name, call.evidence, "evidence")
    return call


def _check_stop(stop: Stop) -> Stop:
    _need(stop.reason in StopReason.__members__.values(), f"unknown stop reason {stop.reason!r}")
    reason = StopReason(stop.reason)
    _need(reason in DECISION_STOP_REASONS,
          f"stop reason {reason.value!r} is set by the runtime, not by a decision "
          f"({_RUNTIME_OWNED.get(reason, '')}); a decision may stop with "
          f"{', '.join(sorted(r.value for r in DECISION_STOP_REASONS))}")
    return stop


def _from_dict(raw: Mapping[str, Any]) -> Decision:
    kind = raw.get("type")
    shapes = {"answer": ({"text"}, Answer), "tool": ({"name", "input"}, ToolCall),
              "ask_human": ({"question"}, AskHuman), "stop": ({"reason"}, Stop)}
    _need(kind in shapes, f"unknown decision type {kind!r}")
    keys, cls = shapes[kind]
    optional = {"evidence"} if kind == "tool" else set()
    _need(keys | {"type"} <= set(raw) <= keys | optional | {"type"},
          f"{kind} decision must have exactly {sorted(keys)}" + (f" (and may have {sorted(optional)})" if optional else ""))
    return parse_decision(cls(**{k: raw[k] for k in (keys | optional) & set(raw)}))


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
        return _check_stop(raw)
    if isinstance(raw, Mapping):
        return _from_dict(raw)
    if isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        calls = tuple(parse_decision(c) for c in raw)
        _need(all(isinstance(c, ToolCall) for c in calls), "a list decision holds only tool calls")
        return parse_decision(ToolCalls(calls))  # type: ignore[arg-type]
    raise InvalidDecision(f"not a decision: {type(raw).__name__}")
