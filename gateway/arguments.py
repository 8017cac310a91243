"""Strict argument parsing, JSON Schema validation and the args hash.

Strict JSON means: UTF-8, one object at the top level, no duplicate keys, no NaN/Infinity,
integers within ±(2^53 - 1) and floats that are finite, so that the RFC 8785 canonical form
exists and two parties hashing the same value agree. ``args_hash`` is
``"sha256:" + hex(sha256(RFC 8785 canonical JSON))``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import rfc8785
from jsonschema import Draft202012Validator

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


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _Reject(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _int(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Reject(f"integer {text[:24]} is outside ±(2^53-1)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"number {text[:24]} is not finite")
    return value


def _constant(name: str) -> Any:
    raise _Reject(f"{name} is not JSON")


def parse_strict(raw: bytes, *, max_bytes: int, what: str = "arguments") -> dict[str, Any]:
    """Parse ``raw`` as one strict JSON object; raise ArgumentsError otherwise."""
    if len(raw) > max_bytes:
        raise ArgumentsError([FieldError("", f"{what} are {len(raw)} bytes, the limit is {max_bytes}")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArgumentsError([FieldError("", f"{what} are not valid UTF-8: {exc.reason}")]) from exc
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float, parse_constant=_constant
        )
    except _Reject as exc:
        raise ArgumentsError([FieldError("", str(exc))]) from exc
    except json.JSONDecodeError as exc:
        raise ArgumentsError([FieldError("", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")]) from exc
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


# The C JSON encoder with sorted keys, no spaces and no ASCII escaping.
_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False  # _plain bounds depth
).encode


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
    outside the subset) goes through jsonschema, which names the field errors.
    """

    validator: Draft202012Validator
    valid: Callable[[Any], bool] | None = None

    @classmethod
    def compile(cls, schema: dict[str, Any]) -> "SchemaValidator":
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        return cls(validator, compile_check(schema))

    def errors(self, args: dict[str, Any]) -> list[FieldError]:
        if self.valid is not None and self.valid(args):
            return []
        found = [
            FieldError(_pointer(err.absolute_path), err.message) for err in self.validator.iter_errors(args)
        ]
        return sorted(found, key=lambda e: (e.path, e.message))


def _pointer(path: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
