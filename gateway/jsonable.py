"""A tool's result data as plain JSON values, so the scrubber sees every string as the text it holds.

What ``gateway.normalize`` does first with a result's data (``jsonable``): a mapping key that is
not text becomes text, and where that text equals another key of the same mapping it gets the
first free ``#n`` suffix (``scrub.distinct_keys``), so no value is lost. Text that is no Unicode
(lone surrogates) is written as escapes (``utf8_text``).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from gateway.arguments import MAX_DEPTH
from gateway.scrub import Scrubber, bytes_to_text, distinct_keys


def utf8_text(text: str) -> str:
    """``text`` with each lone surrogate (text that is no Unicode: a Python tool's string or
    exception, an MCP upstream's ``\\ud800`` escape) written as that escape, six characters: the
    observation, the stored outcome and the audit record can then all hold it (UTF-8 cannot), and
    hold the same text. Done before the scrubber reads it, so it sees the text that is sent."""
    if text.isascii() or encodes_utf8(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def encodes_utf8(text: str) -> bool:
    """``text`` holds no lone surrogate (\\ud800-\\udfff): it is Unicode, and UTF-8 can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Keep:
    """How much of a result's data to keep: room for at least ``chars`` characters of its JSON.

    An observation shows at most its cap of a result's data, so a result far larger is not
    converted, scrubbed and scanned whole only for all but that part to be dropped (16 MiB of
    output held the event loop, and every other call, for seconds). What is kept reaches past the
    cap by the scrubber's margin, and a string cut short is cut where it splits no secret
    (``Scrubber.cut``), so what the observation shows is scrubbed as if nothing had been cut.
    ``cut`` says whether anything was left out (the observation is then ``truncated``)."""

    __slots__ = ("left", "cut", "_scrubber")

    def __init__(self, chars: int, scrubber: Scrubber | None = None) -> None:
        self.left = chars
        self.cut = False
        self._scrubber = scrubber

    def spent(self) -> bool:
        """Whether nothing more is kept (what is left of a list or mapping is then dropped)."""
        if self.left > 0:
            return False
        self.cut = True
        return True

    def text(self, value: str) -> str:
        """``value`` as ``utf8_text`` writes it; its start only when it is longer than the room left."""
        if len(value) <= self.left or self._scrubber is None:
            value = utf8_text(value)
            self.left -= len(value)
            return value
        self.cut = True
        room = max(self.left, 0)
        self.left = 0
        return self._scrubber.cut(utf8_text(value[:room + self._scrubber.margin()]), room)


def jsonable(data: Any, keep: Keep | None = None) -> Any:
    """Plain JSON values only, so the scrubber sees every string as the text it holds.

    Data that is plain already (the usual case) is used as it is: the scrubber copies it anyway.
    Otherwise a copy: bytes (values and keys) as the text they hold (``bytes_to_text``), text with
    lone surrogates as ``utf8_text`` writes it, a NaN or an infinity (which JSON has no number for: a
    Python tool's float, or ``NaN`` in an upstream's JSON) as the text ``NaN``, ``Infinity`` or
    ``-Infinity``, tuples and
    sets as lists, other keys and objects as their ``str``; a key whose text another key of its
    mapping has too is suffixed (``_mapping``), so no value is lost. Never a ``repr`` of the whole:
    in it a byte string is written as escapes that no form of a secret matches. Data nested deeper
    than ``MAX_DEPTH`` becomes its JSON text (one string: walking it could exhaust the stack), in
    which keys that collide are all written, as JSON allows.

    With ``keep``, data larger than its room is copied only as far as the room goes (``Keep``):
    the rest of a list or mapping is dropped, a long string cut."""
    keep = keep or Keep(sys.maxsize)
    if _plain(data, 0, keep.left) >= 0:
        return data
    room = keep.left
    try:
        return _copy(data, 0, keep)
    except _TooDeep:
        keep.left, keep.cut = room, False
        try:
            return keep.text(json.dumps(data, default=_text_of))
        except (TypeError, ValueError, RecursionError):  # a key JSON cannot write, or a cycle
            return f"<{type(data).__name__} nested deeper than {MAX_DEPTH}>"


class _TooDeep(Exception):
    pass


def _copy(value: Any, depth: int, keep: Keep) -> Any:
    if type(value) is str:
        return keep.text(value)
    if type(value) is float and not math.isfinite(value):  # JSON has no NaN or infinity: their names
        return keep.text(json.dumps(value))
    if type(value) in _SCALARS:
        keep.left -= _scalar_size(value)
        return value if type(value) is not int or value.bit_length() <= _LONG_INT_BITS else _long_int(value)
    if isinstance(value, (bytes, bytearray)):
        return keep.text(bytes_to_text(bytes(value)))
    if depth > MAX_DEPTH:
        raise _TooDeep
    if isinstance(value, dict):
        keep.left -= 2  # its brackets, as ``_plain`` counts them
        return _mapping(value, depth, keep)
    if isinstance(value, (list, tuple, set, frozenset)):
        keep.left -= 2
        out = []
        for item in value:
            if keep.spent():
                break
            out.append(_copy(item, depth + 1, keep))
        return out
    return keep.text(_text_of(value))


def _mapping(value: dict[Any, Any], depth: int, keep: Keep) -> dict[str, Any]:
    """``value`` with text keys (``_key``), every value kept (as far as ``keep`` goes): a converted
    key whose text another key has too gets a ``#n`` suffix (``distinct_keys``; a ``str`` key keeps
    its name)."""
    texts: list[str] = []
    renamed: list[bool] = []
    items: list[Any] = []
    for key, item in value.items():  # each key, then its value: as the JSON is written, and kept
        if keep.spent():
            break
        text = keep.text(_key(key, depth))
        texts.append(text)
        renamed.append(type(key) is not str or text != key)
        items.append(_copy(item, depth + 1, keep))
    return dict(zip(distinct_keys(texts, renamed), items))


def _key(key: Any, depth: int) -> str:
    """A mapping key as text: JSON's own form for a scalar (``1``, ``true``, ``null``, ``NaN``), a
    tuple's JSON text (``["a", 2]``), else ``_text_of``."""
    if isinstance(key, str):
        return utf8_text(str.__str__(key))  # the text itself, whatever a str subclass's __str__ says
    try:
        if type(key) in _SCALARS:
            return json.dumps(key)
        if isinstance(key, (tuple, frozenset)):
            return json.dumps(_copy(key, depth + 1, Keep(sys.maxsize)), ensure_ascii=False)
    except ValueError:  # an int too long to write in decimal
        pass
    return _text_of(key)


def _text_of(value: Any) -> str:
    """What a value with no JSON form is shown as: bytes as the text they hold (``bytes_to_text``)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes_to_text(bytes(value))
    try:
        return utf8_text(str.__str__(str(value)))  # exact text: str() passes on a str subclass __str__ returns
    except Exception:  # noqa: BLE001 - a tool's object whose __str__ fails
        return f"<{type(value).__name__} that cannot be shown>"


_SCALARS = (str, int, float, bool, type(None))

_LONG_INT_BITS = 2_000
"""Ints longer than this may be past what Python writes in decimal (``sys.get_int_max_str_digits``:
4,300 digits by default, at least 640 ~ 2,126 bits when set lower): ``_long_int`` checks them."""


def _scalar_size(value: Any) -> int:
    """The characters a scalar's JSON has at least: an int's decimal digits (``bits * 0.3`` is
    fewer than ``bits * log10(2)``), 3 for a float (``0.0``), 4 for true, false and null. Counted
    as one each, 69,000 ints of 2,000 bits passed a 64 KiB cap as 69,000 characters: 41 MB of JSON."""
    if type(value) is int:
        return max(1, value.bit_length() * 3 // 10)
    return 3 if type(value) is float else 4


def _long_int(value: int) -> int | str:
    """A long int as it is if it can be written as JSON, else a text saying what it was: JSON
    encoding would raise at every later step (capping, the response, the stored outcome)."""
    try:
        str(value)
    except ValueError:
        return f"<int of {value.bit_length()} bits that cannot be shown>"
    return value


def _plain(value: Any, depth: int, room: int) -> int:
    """The characters ``value``'s JSON has at least, when it is plain (only dicts with string keys,
    lists and JSON scalars, exact types, at most ``MAX_DEPTH`` deep: the arguments' limit) and that
    is at most ``room``; else -1. Stops at the first value past ``room``."""
    kind = type(value)
    if kind is str:
        return len(value) if len(value) <= room and (value.isascii() or encodes_utf8(value)) else -1
    if kind in _SCALARS:
        size = _scalar_size(value)
        if kind is float and not math.isfinite(value):
            return -1
        return size if size <= room and (kind is not int or value.bit_length() <= _LONG_INT_BITS) else -1
    if depth > MAX_DEPTH:
        return -1
    used = 2  # its brackets: an empty one counts too, or a million of them would be read as nothing
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or encodes_utf8(key)):
                return -1
            used += len(key)
            if (size := _plain(item, depth + 1, room - used)) < 0:
                return -1
            used += size
        return used if used <= room else -1
    if kind is list:
        for item in value:
            if (size := _plain(item, depth + 1, room - used)) < 0:
                return -1
            used += size
        return used if used <= room else -1
    return -1
