"""JSON read strictly: each key once per object (the ``object_pairs_hook`` every strict reader
here uses) and, with ``strict_loads``, every number finite.

``json.loads`` keeps the last value of a key given twice; another reader may keep the first, so
the same text would mean two things (``{"decision": "deny", "decision": "allow"}``); it also reads
``NaN``, ``Infinity`` and numbers past a double's range (``1e400`` as inf). A leaf module: the
arguments, the audit log's verifier, OPA's answers and runtime_client's reading of a model's
tool arguments all read with it.
"""

from __future__ import annotations

import json
import math
from typing import Any


class DuplicateKey(ValueError):
    """A key appears twice in one JSON object (``key`` is it)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key[:64]!r} appears twice in one object")
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``; raises ``DuplicateKey`` when a key comes twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


class NotStrictJson(ValueError):
    """The text is not JSON, or is JSON readers could read differently (the message says how)."""


def strict_loads(raw: bytes | bytearray | str) -> Any:
    """``raw`` as JSON with each key once per object and every number finite; raises ``NotStrictJson``
    (``TypeError`` for a value that is not text or bytes).

    What ``json.loads(raw, object_pairs_hook=..., parse_constant=..., parse_float=...)`` reads, with
    one decoder made once (``json.loads`` makes one per call when given hooks: half the time of a
    small answer from OPA). Bytes are decoded as ``json.loads`` decodes them (UTF-8, -16 or -32 by
    their first bytes); text that starts with a byte order mark is refused, as there.
    """
    try:
        if isinstance(raw, str):
            if raw.startswith("\ufeff"):
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
            text = raw
        elif isinstance(raw, (bytes, bytearray)):
            text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        else:
            raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(raw).__name__}")
        return _decode(text)
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


_decode = json.JSONDecoder(object_pairs_hook=unique_pairs, parse_constant=_constant, parse_float=_finite).decode
