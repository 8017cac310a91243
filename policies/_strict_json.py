"""JSON read strictly, for an engine's answers: what the stdlib reads leniently is refused.

``json.loads`` keeps the last value of a key given twice (``{"decision": "deny", "decision":
"allow"}`` reads as allow), and reads ``NaN``, ``Infinity`` and numbers past a double's range
(``1e400`` as inf). Readers disagree on such text, so a decision in it is no decision.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gateway.json_keys import DuplicateKey, unique_pairs


class NotStrictJson(ValueError):
    """The text is not JSON, or is JSON readers could read differently (the message says how)."""


def loads(raw: bytes | str) -> Any:
    """``raw`` as JSON with each key once per object and every number finite; raises ``NotStrictJson``."""
    try:
        return json.loads(raw, object_pairs_hook=unique_pairs, parse_constant=_constant, parse_float=_finite)
    except NotStrictJson:
        raise
    except DuplicateKey as exc:
        raise NotStrictJson(str(exc)) from None
    except RecursionError:
        raise NotStrictJson("nested too deeply to read") from None
    except ValueError as exc:  # UnicodeDecodeError is one
        raise NotStrictJson(f"not JSON ({exc})") from None


def _constant(name: str) -> Any:
    raise NotStrictJson(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotStrictJson(f"number {text[:24]} is past a double's range")
    return value
