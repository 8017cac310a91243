"""The policy input as JSON, the form both engines send it in (regorus's ``set_input_json``,
the body of OPA's Data API).

``encode_json(value)`` writes what ``json.dumps(value, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)`` writes, through one C encoder made once. ``json.dumps`` (and ``JSONEncoder.encode``) builds a
new C encoder and a circular-reference table on every call; for a call's ~750-byte input that is
~13,000 of ~81,000 instructions (callgrind).
"""

from __future__ import annotations

import json
from json import encoder as _json_encoder
from typing import Any, Callable, NoReturn


def _refuse(value: Any) -> NoReturn:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _compact_encoder() -> Callable[[Any], str]:
    make = getattr(_json_encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the plain call
        return lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # No circular-reference table: a table reused across calls would keep entries after an
    # error. A cyclic value still fails, with RecursionError at the interpreter's depth limit.
    encode = make(None, _refuse, _json_encoder.encode_basestring, None, ":", ",", False, False, False)

    def encode_json(value: Any) -> str:
        if isinstance(value, str):  # the C encoder yields a string's form only inside a container
            return _json_encoder.encode_basestring(value)
        return "".join(encode(value, 0))

    return encode_json


encode_json = _compact_encoder()
"""Compact JSON, non-ASCII characters as they are (so a lone surrogate fails where the text is
made UTF-8, before any engine reads it). Raises ``TypeError`` for a value JSON has no form for,
``ValueError`` for NaN or an infinity, ``RecursionError`` for a cyclic or very deep value."""
