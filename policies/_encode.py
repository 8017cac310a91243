"""The policy input as JSON, the form both engines send it in (regorus's ``set_input_json``,
the body of OPA's Data API).

``encode_json(value)`` writes what ``json.dumps(value, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)`` writes, through one C encoder made once (``gateway.json_encode``): building one
per call was ~13,000 of the ~81,000 instructions that encoding a call's input cost.

Non-ASCII characters are written as they are, so a lone surrogate fails where the text is made
UTF-8, before any engine reads it (OPA's JSON decoder would read its escape as U+FFFD).
"""

from __future__ import annotations

from gateway.json_encode import encoder

encode_json = encoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Raises ``TypeError`` for a value JSON has no form for, ``ValueError`` for NaN or an infinity,
``RecursionError`` for a cyclic or very deep value."""
