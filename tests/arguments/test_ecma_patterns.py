"""``pattern`` and ``patternProperties`` are ECMA-262, on the fast check and in jsonschema alike.

JSON Schema 2020-12 says so; Python's ``re`` differs exactly where a gateway cares (``$``
before a trailing newline, Unicode ``\\d``/``\\w``), and a pattern written for ``re`` only is
refused. Each case is checked three ways: the fast check, the jsonschema class the gateway
uses, and ``SchemaValidator`` (what the pipeline calls).
"""

from __future__ import annotations

import pytest

from gateway.arguments import SchemaValidator
from gateway.ecma_regex import FORMATS, PatternError, Validator, compile_pattern, schema_problems
from gateway.schema_check import compile_check

# (pattern, string, matches under ECMA-262 with the u flag); every row differs from Python's re
SEMANTICS = [
    ("^[A-Z0-9-]{3,32}$", "A-100\n", False),  # $ is the end, not "before a final newline"
    ("^a$", "a\n", False),
    ("^\\d+$", "١٢٣", False),  # \d is [0-9]: no Arabic-Indic digits
    ("^\\d+$", "１２３", False),  # no fullwidth digits
    ("^\\w+$", "раураl", False),  # \w is [A-Za-z0-9_]: no Cyrillic
    ("^\\w+$", "é", False),
    ("\\bfoo\\b", "éfooé", True),  # \b is an ASCII word boundary
    ("^\\s$", "\ufeff", True),  # \s is ECMA white space and line terminators
    ("^\\s$", "\x1c", False),  # ... which does not include the information separators
    ("^.$", "\r", False),  # . matches no line terminator
    ("^.$", "\u2028", False),
    ("^\\p{Lu}+$", "ÀB", True),  # Unicode property classes (u flag)
]

PYTHON_ONLY = ["(?P<n>a)", "a\\Z", "\\Aa", "(?i)a", "a{,3}", "\\-"]


def _string_schema(pattern: str) -> dict:
    return {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}


@pytest.mark.parametrize("pattern, text, matches", SEMANTICS, ids=[f"{p!r}~{t!r}" for p, t, _ in SEMANTICS])
def test_pattern_follows_ecma_262_on_every_path(pattern, text, matches):
    schema = _string_schema(pattern)
    v = SchemaValidator.compile(schema)
    assert v.valid is not None  # the fast check is in use
    assert v.valid({"s": text}) is matches
    assert Validator(schema, format_checker=FORMATS).is_valid({"s": text}) is matches
    assert (v.errors({"s": text}) == []) is matches
    if not matches:
        assert [e.path for e in v.errors({"s": text})] == ["/s"]


@pytest.mark.parametrize("pattern, text, matches", SEMANTICS, ids=[f"{p!r}~{t!r}" for p, t, _ in SEMANTICS])
def test_pattern_properties_follow_ecma_262(pattern, text, matches):
    schema = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    assert compile_check(schema) is None  # jsonschema alone
    assert (SchemaValidator.compile(schema).errors({text: "not an integer"}) == []) is not matches


def test_a_key_with_a_trailing_newline_is_not_covered_by_pattern_properties():
    """With additionalProperties: false, a key neither keyword covers is refused.

    Were ``additionalProperties`` left on ``re`` while ``patternProperties`` is ECMA, ``"x-a\\n"``
    would count as matched by one and be checked by neither: a way around the schema.
    """
    schema = {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "string"}}, "additionalProperties": False}
    v = SchemaValidator.compile(schema)
    assert v.errors({"x-a": "ok"}) == []
    assert [e.path for e in v.errors({"x-a": 1})] == ["/x-a"]
    errors = v.errors({"x-a\n": 1})
    assert len(errors) == 1 and "'x-a\\n' does not match any of the regexes" in errors[0].message


def test_unevaluated_properties_see_ecma_pattern_properties_through_refs():
    schema = {
        "type": "object",
        "$ref": "#/$defs/labels",
        "$defs": {"labels": {"patternProperties": {"^l_[a-z]+$": {"type": "string"}}}},
        "unevaluatedProperties": False,
    }
    v = SchemaValidator.compile(schema)
    assert v.errors({"l_env": "prod"}) == []
    errors = v.errors({"l_env\n": "prod", "l_ok": "x"})
    assert [e.message for e in errors] == ["Unevaluated properties are not allowed ('l_env\\n' was unexpected)"]


def test_a_recursive_schema_keeps_ecma_patterns_below_a_top_level_dollar_schema():
    """``$ref: "#"`` to a root that names its dialect must not fall back to jsonschema's own class."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}, "child": {"$ref": "#"}},
    }
    v = SchemaValidator.compile(schema)
    assert v.errors({"id": "a", "child": {"id": "b"}}) == []
    assert [e.path for e in v.errors({"id": "a", "child": {"id": "b\n"}})] == ["/child/id"]


@pytest.mark.parametrize("schema", [
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    {"type": "object", "$defs": {"x": {"$schema": "https://json-schema.org/draft/2020-12/schema"}}},
])
def test_a_dialect_switch_is_refused(schema):
    problems = schema_problems(schema)
    assert problems and "$schema" in problems[0]
    with pytest.raises(ValueError, match="only 'https://json-schema.org/draft/2020-12/schema'"):
        SchemaValidator.compile(schema)


@pytest.mark.parametrize("pattern", PYTHON_ONLY)
def test_a_pattern_that_is_not_ecma_262_is_refused(pattern):
    with pytest.raises(PatternError):
        compile_pattern(pattern)
    for schema in (_string_schema(pattern), {"type": "object", "patternProperties": {pattern: {}}}):
        assert compile_check(schema) is None
        problems = schema_problems(schema)
        assert len(problems) == 1 and repr(pattern) in problems[0] and "not an ECMA-262 regular expression" in problems[0]
        with pytest.raises(ValueError, match="ECMA-262"):
            SchemaValidator.compile(schema)


def test_the_regex_format_is_ecma_262():
    v = SchemaValidator.compile({"type": "object", "properties": {"re": {"type": "string", "format": "regex"}}})
    assert v.errors({"re": "^[a-z]+$"}) == []
    assert [e.path for e in v.errors({"re": "(?P<n>a)"})] == ["/re"]


def test_a_pattern_is_compiled_once():
    compile_pattern.cache_clear()
    v = SchemaValidator.compile(_string_schema("^[0-9]{4}$"))
    for _ in range(3):
        v.errors({"s": "2024"})
        v.errors({"s": "20245"})  # invalid: jsonschema runs too
    assert compile_pattern.cache_info().misses == 1
