"""JSON encoders made once.

``json.dumps`` and ``JSONEncoder.encode`` build a new C encoder, and a table for spotting circular
references, on every call: ~13,000 instructions, more than encoding a small document takes. The
call path encodes four documents a call (the arguments' canonical form, the policy input, the
observation's data, the stored outcome) besides the audit records. ``encoder(...)`` makes the C
encoder once and returns a function that writes exactly what ``json.dumps(value, ...)`` writes
with the same options.

One difference: there is no circular-reference table, since a table reused across calls could
keep entries after an error. A cyclic value fails with ``RecursionError`` (at the interpreter's
depth limit) where ``json.dumps`` raises ``ValueError``. What the gateway encodes is acyclic by
construction: parsed JSON, or documents it builds itself.
"""

from __future__ import annotations

import json
from json import encoder as _c
from typing import Any, Callable, NoReturn

Encoder = Callable[[Any], str]


def _refuse(value: Any) -> NoReturn:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encoder(
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    ensure_ascii: bool = True,
    allow_nan: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> Encoder:
    """``lambda value: json.dumps(value, sort_keys=..., separators=..., ensure_ascii=..., allow_nan=...,
    default=...)``, with one C encoder made here (see the module docstring)."""
    make = getattr(_c, "c_make_encoder", None)
    if make is None:  # no C accelerator: the plain call
        options = dict(sort_keys=sort_keys, separators=separators, ensure_ascii=ensure_ascii,
                       allow_nan=allow_nan, default=default)
        return lambda value: json.dumps(value, **options)
    item_separator, key_separator = separators
    string = _c.encode_basestring_ascii if ensure_ascii else _c.encode_basestring
    chunks = make(None, default or _refuse, string, None, key_separator, item_separator, sort_keys, False, allow_nan)

    def encode(value: Any) -> str:
        if isinstance(value, str):  # as JSONEncoder.encode: a string needs no chunks
            return string(value)
        return "".join(chunks(value, 0))

    return encode
