"""Whether a value read from YAML is a JSON value, and where it is not.

A tool's ``constraints`` go to the policy as JSON and to the executor as they are, so a value
YAML reads as something else (a date, a set, bytes, a number key, ``.nan``) would reach the two
differently, or make every call to the tool deny with ``policy_unavailable``. The config refuses
it at load instead, saying where it is and what to write.
"""

from __future__ import annotations

import math
from typing import Any

from gateway.arguments import MAX_DEPTH  # nesting allowed: as for a call's arguments
from gateway.jsonable import encodes_utf8


def json_problem(value: Any, where: str, depth: int = 0) -> str | None:
    """``None`` when ``value`` is a JSON value (exact types, string keys, finite numbers, Unicode
    text, at most ``MAX_DEPTH`` deep), else what is wrong and where (``where`` names ``value``)."""
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"{where} is {value}, which JSON has no number for"
    if kind is str:
        return None if _unicode(value) else f"{where} holds a lone surrogate (\\ud800-\\udfff), which is no text"
    if depth >= MAX_DEPTH and kind in (dict, list):
        return f"{where} is nested deeper than {MAX_DEPTH}"
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"{where} has the key {key!r} ({type(key).__name__}): JSON keys are text, so quote it"
            if not _unicode(key):
                return f"{where} has a key holding a lone surrogate (\\ud800-\\udfff), which is no text"
            if (problem := json_problem(item, f"{where}.{key}", depth + 1)) is not None:
                return problem
        return None
    if kind is list:
        for index, item in enumerate(value):
            if (problem := json_problem(item, f"{where}[{index}]", depth + 1)) is not None:
                return problem
        return None
    return f"{where} is a YAML {kind.__name__} value, which JSON has no form for: quote it (or write a list or a map)"


def _unicode(text: str) -> bool:
    return text.isascii() or encodes_utf8(text)
