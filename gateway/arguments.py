"""Strict argument parsing, JSON Schema validation and the args hash.

Strict JSON means: UTF-8, one object at the top level, no duplicate keys, no NaN/Infinity,
integers within ±(2^53 - 1) and floats that are finite, so that the RFC 8785 canonical form
exists and two parties hashing the same value agree. An integer literal past ±(2^53 - 1) is
taken only when it is the RFC 8785 text of a double (``100000000000000000000`` for ``1e20``),
as that double, so canonical arguments parse back to what was hashed. ``args_hash`` is
``"sha256:" + hex(sha256(RFC 8785 canonical JSON))``.

RFC 8785 writes ``1.0`` as ``1`` and ``-0.0`` as ``0``, so ``{"id": 1.0}`` and ``{"id": 1}``
have one hash and the approver is shown ``1``. Arguments and evidence therefore come back
with every integral number within ±(2^53 - 1) as a Python ``int`` (``-0.0`` as ``0``): the
tool receives exactly the value that was hashed and approved, never ``"1.0"`` in its argv
or URL. Token headers and claims are parsed with ``numbers_as_hashed=False`` and keep the
number type as written, so their checks can still refuse a ``1.0`` where an integer is required.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import rfc8785

from gateway import schema_budget
from gateway.ecma_regex import FORMATS, Validator, schema_problems, without_dialect
from gateway.json_encode import encoder
from gateway.json_keys import DuplicateKey, unique_pairs
from gateway.schema_refs import LOCAL_ONLY
from gateway.models import FieldError
from gateway.schema_check import compile_check

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 64


class ArgumentsError(Exception):
    """The arguments are not strict JSON or do not match the schema; carries field errors."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.path or '/'}: {e.message}" for e in errors))
        self.errors = tuple(errors)


class _Reject(ValueError):
    pass


def _int(text: str) -> int:
    # 2^53 - 1 has 16 digits and JSON has no leading zeros, so a longer literal is out of range;
    # it is refused before int(), which raises ValueError past 4,300 digits and is slow near it
    if len(text) - text.startswith("-") > 16:
        raise _Reject(f"integer {text[:24]}... ({len(text)} characters) is outside ±(2^53-1)")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Reject(f"integer {text} is outside ±(2^53-1)")
    return value


def _hashed_int(text: str) -> int | float:
    """An integer literal; past ±(2^53-1) only the text RFC 8785 writes for a double, read as it.

    RFC 8785 writes a double below 1e21 without an exponent (``1e20`` as ``100000000000000000000``),
    so the canonical form of accepted arguments must parse back to the same value: that is what an
    approver's CLI reads. A literal that is not exactly such a double (``9007199254740993``, which
    a double would round) is refused, as before: two parties would not agree on its value.
    """
    digits = len(text) - text.startswith("-")
    if digits <= 16 and abs(value := int(text)) <= MAX_SAFE_INTEGER:
        return value
    if digits <= 21 and rfc8785.dumps(number := float(text)) == text.encode():  # 1e21 on: with an exponent
        return number
    raise _Reject(f"integer {text[:24]}{'...' if len(text) > 24 else ''} is outside ±(2^53-1) and is not the "
                  "RFC 8785 text of a double")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"number {text[:24]}{'...' if len(text) > 24 else ''} is not finite")
    return value


def _number(text: str) -> float | int:
    """A float literal as the number RFC 8785 writes: an int when integral and safe (-0.0 is 0)."""
    value = _float(text)
    if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return int(value)
    return value


def _constant(name: str) -> Any:
    raise _Reject(f"{name} is not JSON")


# The two decoders ``parse_strict`` uses, built once (json.loads builds one per call).
_AS_HASHED = json.JSONDecoder(
    object_pairs_hook=unique_pairs, parse_int=_hashed_int, parse_float=_number, parse_constant=_constant
).decode
_AS_WRITTEN = json.JSONDecoder(
    object_pairs_hook=unique_pairs, parse_int=_int, parse_float=_float, parse_constant=_constant
).decode


def parse_strict(
    raw: bytes, *, max_bytes: int, what: str = "arguments", numbers_as_hashed: bool = True
) -> dict[str, Any]:
    """Parse ``raw`` as one strict JSON object; raise ArgumentsError otherwise.

    ``what`` names the value in errors. ``numbers_as_hashed``: integral floats come back as
    ints, as RFC 8785 writes them (see the module docstring).
    """
    if len(raw) > max_bytes:
        raise ArgumentsError([FieldError("", f"{what} are {len(raw)} bytes, the limit is {max_bytes}")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArgumentsError([FieldError("", f"{what} are not valid UTF-8: {exc.reason}")]) from exc
    try:
        if text.startswith("\ufeff"):  # what json.loads refuses before decoding
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = (_AS_HASHED if numbers_as_hashed else _AS_WRITTEN)(text)
    except DuplicateKey as exc:
        raise ArgumentsError([FieldError("", f"duplicate key {exc.key!r}")]) from exc
    except _Reject as exc:
        raise ArgumentsError([FieldError("", str(exc))]) from exc
    except json.JSONDecodeError as exc:
        message = exc.msg.removesuffix(" at")  # json's "Invalid control character at", then our "at line"
        raise ArgumentsError([FieldError("", f"not valid JSON: {message} at line {exc.lineno} column {exc.colno}")]) from exc
    except RecursionError as exc:
        raise ArgumentsError([FieldError("", "JSON nested too deeply")]) from exc
    if not isinstance(value, dict):
        raise ArgumentsError([FieldError("", f"{what} must be a JSON object, got {type(value).__name__}")])
    _check_depth_and_text(value)
    return value


def _check_depth_and_text(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ArgumentsError([FieldError("", f"JSON nested deeper than {MAX_DEPTH}")])
    if isinstance(value, str):
        _check_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_depth_and_text(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_depth_and_text(item, depth + 1)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgumentsError([FieldError("", "string contains a lone surrogate (\\ud800-\\udfff)")]) from exc


def args_hash(args: dict[str, Any]) -> str:
    """sha256 over the RFC 8785 canonical form of ``args``."""
    return "sha256:" + hashlib.sha256(canonical_json(args)).hexdigest()


# The C JSON encoder with sorted keys, no spaces and no ASCII escaping (_plain bounds the depth).
_encode = encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JCS) canonical form of ``value``, as UTF-8.

    For a value built only of objects with string keys, arrays, strings, booleans, null and
    integers within ±(2^53 - 1) — most arguments — JCS is exactly what Python's C encoder
    writes with sorted keys, no spaces and no ASCII escaping: both escape only ``"``, ``\\``
    and control characters, the same way, and integers print the same. Two exceptions send
    a value to the ``rfc8785`` package instead: a float (JCS prints numbers the ECMAScript
    way, which ``repr`` does not), and a key with a character beyond U+FFFF (JCS sorts keys
    by UTF-16 code units, Python by code points; only those characters order differently).
    A lone surrogate fails the UTF-8 encoding and goes there too, which rejects it.
    tests/arguments/test_canonical_json.py checks both against each other on generated values.
    """
    try:
        if _plain(value, 0):
            return _encode(value).encode()
    except (UnicodeEncodeError, RecursionError):
        pass
    return rfc8785.dumps(value)


def _plain(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if depth > MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or max(key) <= "\uffff") or not _plain(item, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:
            if not _plain(item, depth + 1):
                return False
        return True
    return False


@dataclass(frozen=True, slots=True)
class SchemaValidator:
    """A compiled JSON Schema 2020-12 validator that reports every field error.

    ``valid`` is the fast yes/no check of ``gateway.schema_check`` when the schema is in its
    subset: a valid instance costs only that; an invalid one (and every instance of a schema
    outside the subset) goes through jsonschema, which names the field errors. Both evaluate
    patterns as ECMA-262 and check every format (``gateway.ecma_regex``).
    """

    validator: Any  # an ecma_regex.Validator
    valid: Callable[[Any], bool] | None = None
    keywords: int = 0
    """The schema's size for the validation budget (``gateway.schema_budget``)."""

    @classmethod
    def compile(cls, schema: dict[str, Any]) -> "SchemaValidator":
        """Compile ``schema``; ValueError when the gateway cannot enforce it (``ecma_regex.schema_problems``)."""
        problems = schema_problems(schema)
        if problems:
            raise ValueError("; ".join(problems))
        return cls(Validator(without_dialect(schema), format_checker=FORMATS, registry=LOCAL_ONLY),
                   compile_check(schema), schema_budget.count_keywords(schema))

    def errors(self, args: dict[str, Any]) -> list[FieldError]:
        if self.valid is not None and self.valid(args):
            return []
        steps = schema_budget.budget(self.keywords, args)
        try:
            with schema_budget.bounded(steps):
                found = [FieldError(_pointer(err.absolute_path), _shortened(err.message))
                         for err in self.validator.iter_errors(args)]
        except schema_budget.TooCostly:
            return [FieldError("", TOO_COSTLY.format(steps=steps))]
        return sorted(found, key=lambda e: (e.path, e.message))


TOO_COSTLY = (
    "checking these arguments against the tool's schema took more than {steps:,} steps, the most allowed for "
    "arguments of this size: the schema checks nested values again in each branch (anyOf, oneOf, if, "
    "unevaluatedProperties) at every level of a recursive $ref; send less deeply nested arguments, or ask "
    "the tool's owner to simplify its schema")


MAX_FIELD_MESSAGE = 300


def _shortened(message: str) -> str:
    """jsonschema quotes the whole value (``'…' is too long``): a longer message keeps its start
    and its end (where the reason is) and says how much of the middle it left out, so an answer
    never echoes a large argument back."""
    if len(message) <= MAX_FIELD_MESSAGE:
        return message
    head, tail = MAX_FIELD_MESSAGE * 2 // 3, MAX_FIELD_MESSAGE // 3
    return f"{message[:head]}…[{len(message) - head - tail:,} characters left out]…{message[-tail:]}"


def _pointer(path: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
