"""One validation's work is bounded (``gateway.schema_budget``): arguments nested inside a recursive
schema whose branches check each value again (anyOf, oneOf, unevaluatedProperties) are refused
as too costly, where jsonschema's work doubled with each level (a 190-byte tree took 17 s of the
event loop). What a schema without such recursion checks is never cut short."""

from __future__ import annotations

import json

import pytest

from gateway import schema_budget
from gateway.arguments import TOO_COSTLY, SchemaValidator
from tests.conftest import JsonLineWorker

_KIDS = {"type": "array", "items": {"$ref": "#/$defs/node"}}
SCHEMAS = {
    # 2020-12's way to extend a recursive base: every level validates its subtree twice
    "unevaluated": {
        "$defs": {"base": {"type": "object", "properties": {"name": {"type": "string"}, "kids": _KIDS}},
                  "node": {"allOf": [{"$ref": "#/$defs/base"}], "unevaluatedProperties": False}},
        "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"],
    },
    # the first branch fails only after checking the whole subtree, then the second checks it again
    "anyOf": {
        "$defs": {"node": {"type": "object", "anyOf": [
            {"properties": {"kids": _KIDS}, "required": ["zz"]}, {"properties": {"kids": _KIDS}}]}},
        "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}},
    },
    "oneOf": {
        "$defs": {"node": {"type": "object", "oneOf": [
            {"properties": {"kids": _KIDS}, "required": ["zz"]}, {"properties": {"kids": _KIDS}}]}},
        "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}},
    },
}


def tree(depth: int, leaf: str = "{}") -> dict:
    return json.loads('{"root":' + '{"kids":[' * depth + leaf + "]}" * depth + "}")


_WORKER = """
import json, sys
from gateway.arguments import TOO_COSTLY, SchemaValidator
for line in sys.stdin:
    job = json.loads(line)
    errors = SchemaValidator.compile(job["schema"]).errors(job["args"])
    print(json.dumps([[e.path, e.message] for e in errors]), flush=True)
"""


@pytest.fixture(scope="module")
def worker():
    w = JsonLineWorker(_WORKER)
    yield w
    w.close()


@pytest.mark.parametrize("name", SCHEMAS)
@pytest.mark.parametrize("leaf", ["{}", '{"kids": 1}'])  # valid, and invalid at the deepest level
def test_arguments_deep_in_a_recursive_branching_schema_are_refused_not_checked_for_ever(worker, name, leaf):
    """30 levels: 2^30 times the work unbounded. In a subprocess, so a miss fails instead of hanging."""
    errors = worker.ask({"schema": SCHEMAS[name], "args": tree(30, leaf)}, timeout=60)
    assert errors is not None, "validation did not finish in 60 s"
    if leaf == "{}":  # valid: only the budget refuses it
        assert len(errors) == 1 and errors[0][0] == "" and "took more than" in errors[0][1], errors
    else:  # refused, by the budget or by what was found before it ran out
        assert errors


@pytest.mark.parametrize("name", SCHEMAS)
def test_shallow_arguments_in_the_same_schemas_are_checked_as_ever(name):
    v = SchemaValidator.compile(SCHEMAS[name])
    assert v.errors(tree(4)) == []
    errors = v.errors(tree(4, '{"kids": 1}'))
    assert errors and not any("took more than" in e.message for e in errors)


def test_large_arguments_are_given_a_budget_to_match():
    """Thousands of values, each checked by branches and unevaluatedProperties: linear work,
    however much of it, is within the budget."""
    item = {"anyOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"properties": {"b": {"type": "string"}}, "required": ["b"]}],
            "unevaluatedProperties": False}
    v = SchemaValidator.compile({"type": "object", "properties": {"xs": {"type": "array", "items": item}}})
    xs = [{"b": str(i)} if i % 2 else {"a": i} for i in range(5000)]
    assert v.errors({"xs": xs}) == []
    errors = v.errors({"xs": xs + [{"a": 1, "c": 2}]})
    assert [e.path for e in errors] == ["/xs/5000"]


def test_the_refusal_says_what_to_do():
    message = TOO_COSTLY.format(steps=12345)
    assert "12,345 steps" in message and "less deeply nested" in message and "simplify" in message


def test_work_outside_a_bounded_validation_is_not_counted():
    v = SchemaValidator.compile(SCHEMAS["anyOf"])
    with schema_budget.bounded(1):
        with schema_budget.bounded(10_000_000):
            assert v.validator.is_valid(tree(3))
        with pytest.raises(schema_budget.TooCostly):
            v.validator.is_valid(tree(3))
    assert v.validator.is_valid(tree(12))  # no budget: jsonschema as it is (a config's own checks)
