"""ECMA-262 regular expressions for JSON Schema, and the gateway's 2020-12 validator class.

JSON Schema 2020-12 makes ``pattern``, ``patternProperties`` and the ``regex`` format
ECMA-262 regular expressions. jsonschema evaluates them with Python's ``re``, which lets
through what the schema author meant to forbid: ``$`` also matches before a trailing
newline (``"A-100\\n"`` passes ``^[A-Z0-9-]{3,32}$``), ``\\d``/``\\w``/``\\b`` take any
Unicode digit or letter, and Python-only syntax (``\\Z``, ``(?P<n>…)``, ``(?i)``, ``{,3}``)
compiles with a meaning no other implementation gives it.

Here a pattern is compiled by ``regress`` (Rust's ECMA-262 engine, bound by jsonschema's
author) in Unicode mode, the ``u`` flag: strict ECMA syntax (an unknown escape such as
``\\-`` outside a class or ``\\Z`` is a syntax error, not a literal), code point semantics,
``\\p{…}`` classes; ``\\d``, ``\\w`` and ``\\b`` are ASCII, ``\\s`` is Unicode white space,
``.`` and ``$`` do not match at line terminators. A pattern is compiled once (cached by its
text); one that does not compile raises ``PatternError``.

``Validator`` is Draft 2020-12 with the keywords that evaluate patterns replaced —
``pattern``, ``patternProperties``, and ``additionalProperties``/``unevaluatedProperties``,
which decide which properties ``patternProperties`` covered (and ``uniqueItems`` and
``unevaluatedItems``, linear in the array: ``gateway.linear_keywords``), every keyword counted
against a bounded validation's budget (``gateway.schema_budget``). ``FORMATS`` is 2020-12's format
checker with ``regex`` checked as ECMA-262 (and ``iri``, ``iri-reference``, ``uri-template`` by
``gateway.uri_formats``, in linear time), failing closed: a format it has no checker for
is an error, never a silent pass. ``schema_problems`` is what a tool schema must pass before
the gateway uses it (``config.ToolConfig``, ``arguments.SchemaValidator``); that includes every
pattern passing ``pattern_risk``, since regress has no step limit (a polynomial ``pattern`` is
let through when its subschema's ``maxLength`` is at most ``SHORT_STRING``, and then the
``pattern`` keyword never runs on a longer string), and every ``$ref`` resolving inside the schema,
never fetched (``gateway.schema_refs``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Iterator

import regress
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import FormatError
from referencing.jsonschema import DRAFT202012

from gateway import linear_keywords, schema_budget, uri_formats
from gateway.pattern_risk import assess
from gateway.schema_refs import LOCAL_ONLY, reference_problems

DIALECT = Draft202012Validator.META_SCHEMA["$id"]


class PatternError(ValueError):
    """A pattern is not an ECMA-262 regular expression (in Unicode mode)."""


MAX_ALTERNATIVES = 1000
"""regress compiles a disjunction recursively: some 45,000 alternatives overflow an 8 MB stack
and kill the process (10,000–20,000 on a 2 MB thread stack), so a pattern with more ``|`` than
this (counted anywhere, even escaped or in a class) is refused before it reaches regress."""


def _compile(pattern: str) -> regress.Regex:
    if pattern.count("|") > MAX_ALTERNATIVES:
        raise PatternError(f"a pattern with more than {MAX_ALTERNATIVES} '|' is refused: the ECMA-262 engine"
                           " cannot compile that many alternatives safely")
    try:
        return regress.Regex(pattern, "u")
    except regress.RegressError as exc:
        raise PatternError(f"{pattern!r} is not an ECMA-262 regular expression: {exc}") from exc


compile_pattern = lru_cache(maxsize=4096)(_compile)  # patterns come from tool schemas, never from calls
"""The compiled ECMA-262 ``pattern`` (cached by its text); raises PatternError when it does not compile."""


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (JSON Schema patterns are not anchored)."""
    return compile_pattern(pattern).find(text) is not None


# -- the keywords ------------------------------------------------------------------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    limit = schema.get("maxLength")
    if validator.is_type(limit, "integer") and len(instance) > limit:
        return  # maxLength reports it; a pattern let through for short strings must not run on a long one
    if not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: dict, schema: dict) -> list[str]:
    """The properties neither ``properties`` nor ``patternProperties`` covers."""
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [k for k in instance if k not in named and not any(search(p, k) for p in patterns)]


def _extras(keys: list[str]) -> str:
    return ", ".join(repr(k) for k in sorted(keys, key=str)) + (" was" if len(keys) == 1 else " were")


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # jsonschema 4.26's additionalProperties, with ECMA patterns and the same messages
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(k) for k in sorted(extras))
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({_extras(list(extras))} unexpected)")


def _unevaluated_properties(validator: Any, uneval: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # jsonschema 4.26's unevaluatedProperties, with ECMA patterns and the same messages
    if not validator.is_type(instance, "object"):
        return
    evaluated = set(_evaluated_keys(validator, instance, schema))  # a list would make this quadratic
    bad = []
    for key in instance:
        if key not in evaluated and next(validator.descend(instance[key], uneval, path=key, schema_path=key), None):
            bad.append(key)
    if bad:
        if uneval is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({_extras(bad)} unexpected)")
        else:
            yield ValidationError(
                f"Unevaluated properties are not valid under the given schema ({_extras(bad)} unevaluated and invalid)"
            )


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator: Any, instance: dict, schema: Any) -> list[str]:
    """jsonschema 4.26's ``find_evaluated_property_keys_by_schema``, with ECMA patterns."""
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    for ref_keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(ref_keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            keys += _evaluated_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver), instance, resolved.contents
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys += properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (sub := schema.get(keyword)) is not None:
            keys += (k for k, v in instance.items() if _valid(validator.descend(v, sub)))
    for pattern in schema.get("patternProperties", {}):
        keys += (k for k in instance if search(pattern, k))
    for key, sub in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys += _evaluated_keys(validator, instance, sub)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(keyword, []):
            if _valid(validator.descend(instance, sub)):
                keys += _evaluated_keys(validator, instance, sub)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated_keys(validator, instance, schema["else"])
    return keys


# -- formats -----------------------------------------------------------------------------


class _FailClosedFormats(FormatChecker):
    """A format checker for which a format it cannot check is an invalid value."""

    def check(self, instance: object, format: str) -> None:
        if format not in self.checkers:
            raise FormatError(f"format {format!r} is not checked by the gateway, so no value passes it")
        try:
            super().check(instance, format)
        except FormatError:
            raise
        except Exception as exc:  # a checker failing on a value it was not written for (int("²"), an
            # overflowing duration): that value is not of the format, and the call is refused as such,
            # not answered internal_error as if the gateway had failed
            raise FormatError(f"{instance!r:.80} is not a {format!r}") from exc


def _string_format(check: Callable[[str], bool]) -> Callable[[object], bool]:
    return lambda instance: not isinstance(instance, str) or check(instance)


def _is_regex(instance: object) -> bool:
    if isinstance(instance, str):
        _compile(instance)  # uncached: this text comes from a call, not from a schema
    return True


FORMATS = _FailClosedFormats(())
FORMATS.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
FORMATS.checks("regex", raises=PatternError)(_is_regex)
for _name, _check in uri_formats.CHECKERS.items():  # linear time, in place of jsonschema's (or none)
    FORMATS.checks(_name)(_string_format(_check))

Validator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
        "uniqueItems": linear_keywords.unique_items,  # jsonschema's are quadratic in the array
        "unevaluatedItems": linear_keywords.unevaluated_items,
    },
    format_checker=FORMATS,
)
Validator = validators.extend(  # every keyword counted against the budget of a bounded validation
    Validator, {name: schema_budget.counted(keyword) for name, keyword in Validator.VALIDATORS.items()},
    format_checker=FORMATS,
)


# -- what a tool schema must pass --------------------------------------------------------

_META = Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=FORMATS,  # regex: ECMA-262
                             registry=LOCAL_ONLY)

SHORT_STRING = 256
"""A ``pattern`` at risk of polynomial backtracking (degree <= 3) loads when its subschema's
``maxLength`` is at most this: O(256^3) steps is milliseconds."""


def schema_problems(schema: Any) -> list[str]:
    """Why ``schema`` cannot be used as a tool schema (empty when it can).

    It must be valid JSON Schema 2020-12 with every ``pattern`` and ``patternProperties``
    key an ECMA-262 regular expression that cannot backtrack catastrophically (``_risky``);
    every ``format`` must be one ``FORMATS`` checks; and ``$schema`` may only name 2020-12, at
    the top (elsewhere, or naming another draft, jsonschema would switch to its own validator
    class for that part, with ``re`` patterns); and every ``$ref``/``$dynamicRef`` must resolve
    inside the document, to something that passes these checks too (``gateway.schema_refs``).
    """
    found = _as_schema(schema)
    if found:
        return found
    for where, dialect in _dialects(schema, ""):
        if where or validators.validator_for({"$schema": dialect}, default=Validator) is not Draft202012Validator:
            found.append(f"$schema {dialect!r} at {where or '/'}: only {DIALECT!r}, at the top, is supported")
    return found + list(_risky(schema, "")) + reference_problems(schema, _as_schema)


def _as_schema(schema: Any) -> list[str]:
    """Why ``schema`` fails the meta-schema, or names a format the gateway cannot check."""
    found = []
    for error in _META.iter_errors(schema):
        where = "".join(f"/{p}" for p in error.absolute_path) or "/"
        if error.validator == "format" and error.validator_value == "regex":
            found.append(f"pattern at {where}: {error.cause}")
        else:
            found.append(f"not a valid JSON Schema 2020-12: {error.message} (at {where})")
    if found:
        return found
    for fmt in sorted({s["format"] for s in _subschemas(schema) if isinstance(s, dict) and "format" in s}):
        if fmt not in FORMATS.checkers:
            found.append(f"format {fmt!r} has no checker in the gateway, so it would go unchecked")
    return found


def _risky(value: Any, where: str) -> Iterator[str]:
    """Every pattern in the document that can backtrack catastrophically (``gateway.pattern_risk``).

    Like ``_dialects`` it looks in every object, not only in subschemas: a ``$ref`` may point anywhere.
    """
    if isinstance(value, dict):
        pattern, keys = value.get("pattern"), value.get("patternProperties")
        if isinstance(pattern, str) and (reason := _risk(pattern, value)):
            yield f"pattern {pattern!r} at {where}/pattern can backtrack catastrophically: {reason}"
        for key in keys if isinstance(keys, dict) else ():
            if reason := _risk(key, None):
                yield f"patternProperties key {key!r} at {where}/patternProperties can backtrack catastrophically:" \
                      f" {reason}"
        for key, item in value.items():
            yield from _risky(item, f"{where}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _risky(item, f"{where}/{i}")


def _risk(pattern: str, subschema: dict | None) -> str | None:
    """Why ``pattern`` is refused, or None; ``subschema`` holds it as ``pattern`` (None: a property-name pattern)."""
    try:
        compile_pattern(pattern)
    except PatternError:
        return None  # not a pattern jsonschema evaluates (the meta-schema check passed): data that looks like one
    risk = assess(pattern)
    if risk is None or risk.kind != "polynomial" or risk.degree > 3 or subschema is None:
        return None if risk is None else risk.reason
    limit = subschema.get("maxLength")
    if type(limit) is int and limit <= SHORT_STRING:
        return None
    return f"{risk.reason}, or give the string a maxLength of at most {SHORT_STRING}"


def without_dialect(schema: Any) -> Any:
    """``schema`` without its top-level ``$schema`` (the 2020-12 one; see schema_problems)."""
    if isinstance(schema, dict) and "$schema" in schema:
        return {k: v for k, v in schema.items() if k != "$schema"}
    return schema


def _subschemas(schema: Any) -> Iterator[Any]:
    yield schema
    if isinstance(schema, dict):
        for sub in DRAFT202012.subresources_of(schema):
            yield from _subschemas(sub)


def _dialects(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every ``$schema`` string anywhere in the document (a ``$ref`` may point anywhere)."""
    if isinstance(value, dict):
        if isinstance(value.get("$schema"), str):
            yield where, value["$schema"]
        for key, item in value.items():
            yield from _dialects(item, f"{where}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _dialects(item, f"{where}/{i}")
