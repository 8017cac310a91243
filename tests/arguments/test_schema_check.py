"""The fast schema check agrees with jsonschema on every schema it accepts.

It only ever answers *valid or not*; if it said *valid* where jsonschema says *invalid*, the
gateway would execute arguments its schema forbids. "jsonschema" here is the gateway's
Draft 2020-12 class, ``ecma_regex.Validator``: stock jsonschema with ECMA-262 patterns
(tests/arguments/test_ecma_patterns.py pins those semantics). So: generated schemas from the subset,
generated instances (random, and ones built to sit on each keyword's boundary), and
hand-picked cases where JSON Schema's typing is subtle — all must agree exactly.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.scenarios import SCHEMA as BENCH_SCHEMA
from gateway.arguments import SchemaValidator
from gateway.ecma_regex import FORMATS, Validator
from gateway.schema_check import compile_check

TYPES = ["null", "boolean", "object", "array", "number", "integer", "string"]
NAMES = ["a", "b", "n", "text", "tags", "é", ""]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.5, 1e300]),
    st.integers(-(2**53) + 1, 2**53 - 1), st.text(max_size=6),
    st.sampled_from(["a", "b", "1", "true", "😀😀", "a\n", "b\n", "١٢", "é\u00a0"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(NAMES), inner, max_size=4)),
    max_leaves=12,
)
numbers = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -0.5, 1.0, 2.0, 2.5]))
sizes = st.integers(0, 4)


def schemas() -> st.SearchStrategy:
    def node(children: st.SearchStrategy) -> st.SearchStrategy:
        keywords = {
            "type": st.one_of(st.sampled_from(TYPES), st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)),
            "properties": st.dictionaries(st.sampled_from(NAMES), children, max_size=3),
            "required": st.lists(st.sampled_from(NAMES), max_size=3, unique=True),
            "additionalProperties": children,
            "items": children,
            "minItems": sizes, "maxItems": sizes, "minLength": sizes, "maxLength": sizes,
            "minimum": numbers, "maximum": numbers, "exclusiveMinimum": numbers, "exclusiveMaximum": numbers,
            "pattern": st.sampled_from(["^a", "b$", "[0-9]", "^$", "é", "^a$", "^\\d+$", "\\w$", "\\s", "^.$"]),
            "enum": st.lists(scalars, min_size=1, max_size=4),
            "const": scalars,
            "description": st.text(max_size=5),
        }
        return st.lists(st.sampled_from(sorted(keywords)), max_size=5, unique=True).flatmap(
            lambda keys: st.fixed_dictionaries({k: keywords[k] for k in keys})
        )

    return st.recursive(st.one_of(st.booleans(), node(st.just(True))), node, max_leaves=6)


def jsonschema_valid(schema, instance) -> bool:
    return Validator(schema, format_checker=FORMATS).is_valid(instance)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(), instances=st.lists(json_values, min_size=1, max_size=8))
def test_agrees_with_jsonschema_on_generated_schemas(schema, instances):
    check = compile_check(schema)
    assert check is not None, schema  # every generated schema is in the subset
    for instance in instances:
        assert check(instance) == jsonschema_valid(schema, instance), (schema, instance)


@settings(max_examples=400, deadline=None)
@given(schema=schemas(), data=st.data())
def test_agrees_on_instances_near_the_schema(schema, data):
    """Instances assembled from the schema's own values (names, bounds, members) hit the edges."""
    check = compile_check(schema)
    pool = _values_from(schema)
    instance = data.draw(st.recursive(
        st.sampled_from(pool) if pool else scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.sampled_from(_names_from(schema) or NAMES), inner, max_size=4)),
        max_leaves=10,
    ))
    assert check(instance) == jsonschema_valid(schema, instance), (schema, instance)


def _values_from(schema) -> list:
    found: list = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                found += [value, value + 1, value - 1, value + 0.5, float(value)]
            elif key in ("minLength", "maxLength"):
                found += ["x" * value, "x" * (value + 1), "😀" * value, "a" * max(0, value - 1)]
            elif key == "enum":
                found += list(value)
            elif key == "const":
                found.append(value)
            elif key in ("properties",):
                for sub in value.values():
                    found += _values_from(sub)
            elif key in ("items", "additionalProperties"):
                found += _values_from(value)
    return found + [True, False, None, 0, 1, 1.0, "a"]


def _names_from(schema) -> list:
    if not isinstance(schema, dict):
        return []
    names = list(schema.get("properties", {})) + list(schema.get("required", []))
    for sub in schema.get("properties", {}).values():
        names += _names_from(sub)
    return names


SUBTLE = [
    ({"type": "integer"}, [1, 1.0, 1.5, True, False, -0.0, 2**53 - 1, "1", None]),
    ({"type": "number"}, [1, 1.5, True, None, "1", []]),
    ({"type": ["string", "null"]}, ["", None, 0, False]),
    ({"enum": [1, "1", None]}, [1, 1.0, True, "1", None, False, [1], {"a": 1}]),
    ({"enum": [True, 0]}, [True, 1, 0, 0.0, False, "true"]),
    ({"const": False}, [False, 0, 0.0, None, ""]),
    ({"const": 0}, [0, 0.0, -0.0, False]),
    ({"minimum": 0}, [-1, 0, True, False, "-1", None, -0.5]),
    ({"exclusiveMaximum": 1}, [1, 0.999, True, 1.0]),
    ({"maxLength": 2}, ["ab", "abc", "😀😀", "😀😀😀", 123, ["a", "b", "c"]]),
    ({"minItems": 1}, [[], [None], "", {}]),
    ({"required": ["a"]}, [{}, {"a": None}, [], "a", None]),
    ({"properties": {"a": False}}, [{}, {"a": 1}, {"b": 1}, []]),
    ({"additionalProperties": False}, [{}, {"a": 1}, [], "x"]),
    ({"properties": {"a": True}, "additionalProperties": {"type": "string"}}, [{"a": 1}, {"b": 1}, {"b": "x"}]),
    ({"items": {"type": "integer"}}, [[1, 2.0], [1, True], [], {"a": "x"}]),
    ({"pattern": "^[a-z]+$"}, ["abc", "ABC", "", 5, "abc\n"]),
    ({"pattern": "^\\w\\d\\s$"}, ["a1 ", "é1 ", "a١ ", "a1\u00a0", "a1\x1c", "a1 \n"]),
    (BENCH_SCHEMA, [{"text": "x", "n": 0}, {"text": "x", "n": -1}, {"text": "x", "n": 1.0}, {"text": "x", "n": True},
                    {"text": "x", "n": 1, "tags": ["a"] * 9}, {"text": "x", "n": 1, "extra": 1}, {"n": 1}]),
]


@pytest.mark.parametrize("schema, instances", SUBTLE, ids=[json.dumps(s)[:40] for s, _ in SUBTLE])
def test_agrees_on_subtle_cases(schema, instances):
    check = compile_check(schema)
    assert check is not None
    for instance in instances:
        assert check(instance) == jsonschema_valid(schema, instance), instance


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/x", "$defs": {"x": {}}},
    {"anyOf": [{"type": "string"}]},
    {"type": "string", "format": "email"},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
    {"patternProperties": {"^a": {}}},
    {"prefixItems": [{}]},
    {"x-vendor": 1},
    {"properties": {"a": {"not": {}}}},
    {"enum": [[1], {"a": 1}]},
    {"minimum": "1"},
    {"type": "decimal"},
    {"pattern": "("},
    {"pattern": "(?P<n>a)"},  # Python-only syntax: not ECMA-262
    {"pattern": "a\\Z"},
])
def test_schemas_outside_the_subset_are_left_to_jsonschema(schema):
    assert compile_check(schema) is None


def test_the_validator_reports_jsonschemas_errors_for_invalid_arguments():
    v = SchemaValidator.compile(BENCH_SCHEMA)
    assert v.valid is not None
    assert v.errors({"text": "x", "n": 1}) == []
    errors = v.errors({"text": 5, "n": -1, "extra": True})
    assert [e.path for e in errors] == ["", "/n", "/text"]
    assert errors == SchemaValidator(v.validator).errors({"text": 5, "n": -1, "extra": True})
