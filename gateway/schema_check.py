"""A compiled yes/no check for the common subset of JSON Schema 2020-12.

``compile_check(schema)`` returns a function ``instance -> bool`` that agrees with
``ecma_regex.Validator(schema, format_checker=ecma_regex.FORMATS).is_valid(instance)``, or
``None`` when the schema uses anything outside the subset below; then jsonschema does all
the work. It only answers *valid or not*: an invalid instance is handed to jsonschema for
the field errors, so callers see exactly jsonschema's messages (``arguments.SchemaValidator``).

Why: a tool schema is checked on every call and jsonschema's general machinery (a validator
object per subschema, an error generator per keyword) was ~30–45 µs of the ~450 µs call
path for a five-field schema; this check takes a few µs.

The subset: boolean schemas; ``type`` (one name or a list); ``properties``; ``required``;
``additionalProperties``; ``items`` (one schema); ``minItems``/``maxItems``;
``minLength``/``maxLength``; ``minimum``/``maximum``/``exclusiveMinimum``/
``exclusiveMaximum``; ``pattern``; ``enum``/``const`` of strings, numbers, booleans and
null; and the annotations ``title``, ``description``, ``default``, ``examples``,
``$comment``, ``deprecated``, ``readOnly``, ``writeOnly``. Anything else — a ``$ref``, a
combinator, ``format``, ``$schema`` (jsonschema switches dialect on it), an unknown keyword —
returns ``None``. Semantics follow
jsonschema: booleans are not numbers, ``1.0`` is an integer, lengths count code points,
``pattern`` is an unanchored ECMA-262 search (``ecma_regex.search``; one that does not
compile returns ``None``), and each keyword applies only to its own instance type.
tests/arguments/test_schema_check.py holds the two to agreement on generated schemas and
instances.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

from gateway.ecma_regex import PatternError, compile_pattern
from gateway.linear_keywords import json_key

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)
_KEYWORDS = _ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "enum", "const",
}


class _Unsupported(Exception):
    pass


def compile_check(schema: Any) -> Check | None:
    """The check for ``schema``, or None when it is outside the subset (see the module docstring)."""
    try:
        return _node(schema)
    except (_Unsupported, PatternError, RecursionError):
        return None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_integer(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


_TYPES: dict[str, Check] = {
    "null": lambda x: x is None,
    "boolean": lambda x: isinstance(x, bool),
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "number": _is_number,
    "integer": _is_integer,
}


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


def _node(schema: Any) -> Check:
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict) or not schema.keys() <= _KEYWORDS:
        raise _Unsupported
    checks: list[Check] = []
    if "type" in schema:
        checks.append(_type(schema["type"]))
    if "enum" in schema or "const" in schema:
        checks.extend(_enum(schema))
    checks.extend(_object(schema))
    checks.extend(_array(schema))
    checks.extend(_string(schema))
    checks.extend(_number(schema))
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda x: all(check(x) for check in checks)


def _type(names: Any) -> Check:
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
        raise _Unsupported
    preds = [_TYPES[n] for n in names]
    if len(preds) == 1:
        return preds[0]
    return lambda x: any(p(x) for p in preds)


def _scalar_key(value: Any) -> Hashable:
    """``json_key`` of a scalar: how jsonschema compares enum members (bools only equal bools,
    1 == 1.0). Arrays, objects and NaN (which equals nothing) are left to jsonschema."""
    if not (value is None or isinstance(value, (str, int, float))) or value != value:
        raise _Unsupported
    return json_key(value)


def _enum(schema: dict[str, Any]) -> list[Check]:
    checks = []
    if "enum" in schema:
        members = schema["enum"]
        if not isinstance(members, list):
            raise _Unsupported
        allowed = {_scalar_key(m) for m in members}
        checks.append(lambda x: _member(x, allowed))
    if "const" in schema:
        allowed_const = {_scalar_key(schema["const"])}
        checks.append(lambda x: _member(x, allowed_const))
    return checks


def _member(x: Any, allowed: set[Hashable]) -> bool:
    try:
        return _scalar_key(x) in allowed
    except _Unsupported:
        return False  # an array or object never equals a scalar member


def _object(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    props_schema = schema.get("properties", {})
    if not isinstance(props_schema, dict):
        raise _Unsupported
    props = {name: _node(sub) for name, sub in props_schema.items()}
    if props:
        items = list(props.items())

        def properties(x: Any) -> bool:
            if not isinstance(x, dict):
                return True
            for name, check in items:
                if name in x and not check(x[name]):
                    return False
            return True

        checks.append(properties)
    if "required" in schema:
        required = schema["required"]
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise _Unsupported
        needed = tuple(required)
        checks.append(lambda x: not isinstance(x, dict) or all(r in x for r in needed))
    if "additionalProperties" in schema:
        extra = _node(schema["additionalProperties"])
        if extra is _never:
            checks.append(lambda x: not isinstance(x, dict) or all(k in props for k in x))
        elif extra is not _always:
            checks.append(
                lambda x: not isinstance(x, dict) or all(k in props or extra(v) for k, v in x.items())
            )
    return checks


def _array(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    if "items" in schema:
        item = _node(schema["items"])  # a list here is pre-2020 syntax: _node refuses it
        if item is not _always:
            checks.append(lambda x: not isinstance(x, list) or all(item(v) for v in x))
    low, high = _bound(schema, "minItems"), _bound(schema, "maxItems")
    if low is not None:
        checks.append(lambda x: not isinstance(x, list) or len(x) >= low)
    if high is not None:
        checks.append(lambda x: not isinstance(x, list) or len(x) <= high)
    return checks


def _string(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    low, high = _bound(schema, "minLength"), _bound(schema, "maxLength")
    if low is not None:
        checks.append(lambda x: not isinstance(x, str) or len(x) >= low)
    if high is not None:
        checks.append(lambda x: not isinstance(x, str) or len(x) <= high)
    if "pattern" in schema:
        if not isinstance(schema["pattern"], str):
            raise _Unsupported
        find = compile_pattern(schema["pattern"]).find  # compiled once, here
        longest = high if high is not None else float("inf")  # a longer string fails maxLength: never searched
        checks.append(lambda x: not isinstance(x, str) or len(x) > longest or find(x) is not None)
    return checks


def _number(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    for keyword, fails in (  # jsonschema's own failure conditions, negated
        ("minimum", lambda x, b: x < b),
        ("maximum", lambda x, b: x > b),
        ("exclusiveMinimum", lambda x, b: x <= b),
        ("exclusiveMaximum", lambda x, b: x >= b),
    ):
        if keyword in schema:
            bound = schema[keyword]
            if not _is_number(bound) or bound != bound or bound in (float("inf"), float("-inf")):
                raise _Unsupported
            checks.append(lambda x, b=bound, fails=fails: not _is_number(x) or not fails(x, b))
    return checks


def _bound(schema: dict[str, Any], keyword: str) -> int | None:
    if keyword not in schema:
        return None
    value = schema[keyword]
    if not _is_integer(value) or value < 0:
        raise _Unsupported
    return int(value)
