"""Printing what came from agents, tools, a gateway or a log file on a terminal: control and
format characters (escape sequences, C1 controls such as CSI, bidi overrides, zero-width
characters, lone surrogates) are escaped, so what prints is what was sent and nothing is drawn
over it. A leaf module (the standard library only): the CLI and ``policies.replay`` use it."""

from __future__ import annotations

import json
import unicodedata
from typing import Any


def shown(text: str) -> str:
    """``text`` with every control or format character (C0/C1 controls, ESC, new lines, bidi
    overrides, zero-width characters: Unicode categories Cc, Cf, Cs, Co, Cn, Zl, Zp) escaped, so
    what prints is what was sent."""
    return "".join(c if not _unsafe(c) else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                   for c in text)


def json_text(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, **kwargs)`` with the characters ``shown`` escapes
    written as JSON escapes (json.dumps escapes only C0 controls): the same JSON, readable
    text, safe on a terminal."""
    text = json.dumps(obj, ensure_ascii=False, **kwargs)
    if text.isascii() and "\x7f" not in text:
        return text
    return "".join(json.dumps(c)[1:-1] if c >= "\x7f" and _unsafe(c) else c for c in text)


def _unsafe(c: str) -> bool:
    category = unicodedata.category(c)
    return category[0] == "C" or category in ("Zl", "Zp")
