"""``uniqueItems``, ``unevaluatedItems`` and ``unevaluatedProperties`` cost linear time in the
agent's array or object, and decide exactly as jsonschema's own keywords do."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gateway.arguments import SchemaValidator
from gateway.ecma_regex import Validator
from gateway.linear_keywords import json_key
from tests._timing import cpu_seconds, least_times

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, -1.0, 1.5, 2.0]),
                     st.sampled_from(["", "a", "1", "true"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "1"]), inner, max_size=3)), max_leaves=8)


@settings(max_examples=2000, deadline=None, derandomize=True, database=None)
@given(st.lists(_values, max_size=6))
def test_unique_items_decides_as_jsonschema_does(items):
    """Numbers equal by value (1 and 1.0), booleans never equal to numbers, members in any order."""
    schema = {"uniqueItems": True}
    assert Validator(schema).is_valid(items) == Draft202012Validator(schema).is_valid(items)


@pytest.mark.parametrize("items, unique", [
    ([1, 1.0], False), ([True, 1], True), ([False, 0], True), ([None, False], True), ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
    ([[1, 2], [2, 1]], True), ([[1.0], [1]], False), (["1", 1], True), ([{"a": [True]}, {"a": [1]}], True), ([], True),
])
def test_unique_items_cases(items, unique):
    assert Validator({"uniqueItems": True}).is_valid(items) is unique
    assert Draft202012Validator({"uniqueItems": True}).is_valid(items) is unique


def test_json_key_is_equal_for_equal_json_values():
    assert json_key({"a": [1, {"b": 2.0}]}) == json_key({"a": [1.0, {"b": 2}]})
    assert json_key([True]) != json_key([1]) and json_key(None) != json_key(False) and json_key("1") != json_key(1)


UNEVALUATED_ITEMS = [
    {"prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
    {"anyOf": [{"prefixItems": [{}]}, {"contains": {"type": "integer"}}], "unevaluatedItems": False},
    {"if": {"prefixItems": [{"type": "string"}]}, "then": {"prefixItems": [{}, {"type": "integer"}]},
     "unevaluatedItems": {"type": "boolean"}},
    {"allOf": [{"contains": {"type": "string"}}], "unevaluatedItems": {"type": "integer"}},
]


@pytest.mark.parametrize("schema", UNEVALUATED_ITEMS)
@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(items=st.lists(_scalars, max_size=5))
def test_unevaluated_items_decides_as_jsonschema_does(schema, items):
    ours = sorted(e.message for e in Validator(schema).iter_errors(items))
    theirs = sorted(e.message for e in Draft202012Validator(schema).iter_errors(items))
    assert ours == theirs


GROWING = {
    "uniqueItems of objects": ({"type": "array", "uniqueItems": True},
                               lambda n: [{"a": i, "b": [i, str(i)]} for i in range(n)]),
    "uniqueItems, a duplicate last": ({"type": "array", "uniqueItems": True},
                                      lambda n: [{"a": i} for i in range(n)] + [{"a": 0}]),
    "uniqueItems of numbers and strings": ({"type": "array", "uniqueItems": True},
                                           lambda n: [i if i % 2 else str(i) for i in range(n)]),
    "unevaluatedItems": ({"type": "array", "anyOf": [{"prefixItems": [{}]}, {"contains": {"type": "integer"}}],
                          "unevaluatedItems": False}, lambda n: list(range(n))),
    "unevaluatedProperties": ({"type": "object", "anyOf": [{"properties": {"x": {}}}, {"patternProperties": {"^a": {}}}],
                               "unevaluatedProperties": False}, lambda n: {f"a{i}": i for i in range(n)}),
}


SIZES = [1_000, 2_000, 4_000, 8_000, 16_000]
LIMIT_EXPONENT = 1.5
"""Fitted over 16x the items: linear time gives about 1 (1.1 where the data outgrows a cache), quadratic 2.
1.5 catches a quadratic term as small as the ratio limit of 8 between 2,000 and 8,000 items did (half
the linear term at 2,000), with more room for noise or for a step in a linear keyword's cost at one size."""
FLOOR_SECONDS = 0.001
"""Below this for 16,000 items the growth is not judged (the smallest sizes then take microseconds)."""


@pytest.mark.parametrize("name", list(GROWING))
def test_a_keyword_costs_linear_time_in_the_instance(name):
    """jsonschema's own took 3.4 s for 2,000 objects (uniqueItems) and grew 9-12x for 4x the
    items (unevaluatedItems/Properties: list lookups). CPU time, least of interleaved rounds
    (``tests._timing``)."""
    schema, make = GROWING[name]
    validator = SchemaValidator.compile({"type": "object", "properties": {"x": schema}})
    instances = {n: {"x": make(n)} for n in SIZES}
    timings = least_times(lambda n: cpu_seconds(validator.errors, instances[n]), SIZES,
                          lambda t: t.seconds[-1] < FLOOR_SECONDS or t.exponent < LIMIT_EXPONENT,
                          budget=4.0, give_up=2.0)
    assert timings.seconds[SIZES.index(8_000)] < 1.0, f"{name}: over 1 s for 8,000: {timings}"
    if timings.seconds[-1] >= FLOOR_SECONDS:
        assert timings.exponent < LIMIT_EXPONENT, f"{name}: super-linear: {timings}"
