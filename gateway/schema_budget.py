"""A bound on the work of one validation, so the arguments an agent writes cannot make it exponential.

jsonschema decides ``anyOf``, ``oneOf``, ``if`` and the ``unevaluated*`` keywords by validating a
value again under each branch or sibling. In a recursive schema (a ``$ref`` back to a node that
holds such a keyword) every level of nesting in the arguments doubles the work: a 190-byte tree
16 levels deep took 17 s, holding the event loop and every other call with it.

A validation that applies each keyword of the schema at most once to each value of the
arguments makes at most (values) × (keywords) keyword calls. ``SchemaValidator.errors`` allows
``HEADROOM`` times that (re-validation to a fixed depth, as a schema without recursion has), at
least ``FLOOR``; past it the keyword about to run raises ``TooCostly``, and the call is refused as
``invalid_arguments``. Work outside ``bounded`` (a config's own checks) is not counted.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

HEADROOM = 16
FLOOR = 10_000

Keyword = Callable[[Any, Any, Any, Any], Any]


class TooCostly(Exception):
    """The validation made more keyword calls than its budget."""

    def __init__(self, steps: int) -> None:
        super().__init__(f"more than {steps:,} keyword evaluations")
        self.steps = steps


_state = threading.local()  # validation is synchronous: one budget per thread at a time


def counted(keyword: Keyword) -> Keyword:
    """``keyword`` (a jsonschema keyword function), taking one step of the running budget."""

    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        left = getattr(_state, "left", None)
        if left is not None:
            if left <= 0:
                raise TooCostly(_state.steps)
            _state.left = left - 1
        return keyword(validator, value, instance, schema)

    return run


@contextmanager
def bounded(steps: int) -> Iterator[None]:
    """Keyword calls inside are limited to ``steps``; ``TooCostly`` past them."""
    saved = getattr(_state, "left", None), getattr(_state, "steps", 0)
    _state.left, _state.steps = steps, steps
    try:
        yield
    finally:
        _state.left, _state.steps = saved


def budget(keywords: int, args: Any) -> int:
    """The steps a validation of ``args`` against a schema of ``keywords`` keywords may take."""
    return max(FLOOR, HEADROOM * keywords * count_values(args))


def count_values(value: Any) -> int:
    """JSON values in ``value``, itself included (object keys not counted)."""
    return sum(1 for _ in _nodes(value))


def count_keywords(schema: Any) -> int:
    """Keys of every object in ``schema`` (keywords and property names alike: an upper bound)."""
    return sum(len(node) for node in _nodes(schema) if isinstance(node, dict))


def _nodes(value: Any) -> Iterator[Any]:
    """``value`` and every value inside it, each once (no recursion: any depth)."""
    stack = [value]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
