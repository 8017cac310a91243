"""``format`` is always checked: every 2020-12 format has a checker, and no schema skips one.

jsonschema checks ``uri``, ``date-time``, ``hostname``... only when optional packages are
installed (``jsonschema[format-nongpl]``) and otherwise lets any value through in silence.
The gateway depends on them, refuses a tool schema naming a format it cannot check, and
treats a format it meets anyway (through a ``$ref`` into an unknown keyword) as a failure.
"""

from __future__ import annotations

import pytest

from gateway.arguments import SchemaValidator
from gateway.ecma_regex import FORMATS, schema_problems

# every format JSON Schema 2020-12 defines (Validation, section 7.3)
FORMATS_2020_12 = [
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
    "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
    "relative-json-pointer", "regex",
]

# (format, a value it refuses, a value it accepts)
CASES = [
    ("uri", "not a uri", "https://example.com/a?b=c"),
    ("uri-reference", "\\\\x y", "/a/b#c"),
    ("iri", "not an iri", "https://exämple.com/ä"),
    ("date-time", "yesterday", "2024-02-29T12:30:00Z"),
    ("date-time", "2024-02-29 12:30:00", "2024-02-29T12:30:00+01:00"),
    ("time", "25:99", "12:30:00Z"),
    ("duration", "forever", "P1DT2H"),
    ("hostname", "evil host;rm -rf /", "api.example.com"),
    ("idn-hostname", "a b", "bücher.example"),
    ("uri-template", "/items/{id", "/items/{id}"),
    ("json-pointer", "a/b", "/a/b"),
    ("email", "nobody", "a@example.com"),
    ("uuid", "1234", "123e4567-e89b-12d3-a456-426614174000"),
]


def _schema(fmt: str) -> dict:
    return {"type": "object", "properties": {"x": {"type": "string", "format": fmt}}}


def test_every_2020_12_format_has_a_checker():
    missing = [f for f in FORMATS_2020_12 if f not in FORMATS.checkers]
    assert missing == [], f"install the format checkers pyproject.toml lists; unchecked: {missing}"


@pytest.mark.parametrize("fmt, bad, good", CASES, ids=[f"{f}:{b}" for f, b, _ in CASES])
def test_a_format_refuses_a_bad_value(fmt, bad, good):
    v = SchemaValidator.compile(_schema(fmt))
    assert v.valid is None  # format is left to jsonschema
    assert v.errors({"x": good}) == []
    errors = v.errors({"x": bad})
    assert [e.path for e in errors] == ["/x"] and fmt in errors[0].message


@pytest.mark.parametrize("schema", [
    _schema("phone-number"),
    {"type": "object", "$defs": {"d": {"items": {"format": "int32"}}}},
    {"type": "object", "properties": {"a": {"anyOf": [{"format": "color"}]}}},
])
def test_a_schema_with_a_format_nothing_checks_is_refused(schema):
    problems = schema_problems(schema)
    assert len(problems) == 1 and "has no checker" in problems[0]
    with pytest.raises(ValueError, match="has no checker"):
        SchemaValidator.compile(schema)


def test_a_format_used_as_a_value_is_not_mistaken_for_the_keyword():
    schema = {"type": "object", "properties": {"format": {"enum": ["pdf", "png"]}}, "default": {"format": "pdf"}}
    assert schema_problems(schema) == []


def test_a_format_reached_only_through_a_ref_is_refused_at_load():
    schema = {"type": "object", "properties": {"x": {"$ref": "#/x-lib/phone"}}, "x-lib": {"phone": {"format": "phone"}}}
    with pytest.raises(ValueError, match="at \\$ref '#/x-lib/phone': format 'phone' has no checker"):
        SchemaValidator.compile(schema)  # the references are followed when the schema loads


@pytest.mark.parametrize("fmt, value", [
    ("relative-json-pointer", "\u00b21"),  # str.isdigit() holds for a superscript two; int() refuses it
    ("duration", "P1e9999999D"),  # the checker's Decimal arithmetic overflows
])
def test_a_value_a_checker_fails_on_is_refused_as_not_of_the_format(fmt, value):
    """A checker that raises on a value it was not written for refuses that value, as a field
    error: the call is invalid_arguments, not an internal_error of the gateway."""
    v = SchemaValidator.compile({"type": "object", "properties": {"x": {"type": "string", "format": fmt}}})
    [error] = v.errors({"x": value})
    assert error.path == "/x" and fmt in error.message
