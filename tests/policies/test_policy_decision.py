"""parse_decision reads the decision document strictly: every malformed shape denies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import UNDEFINED, PolicyDecision, PolicyError, parse_decision, single_value
from policies._decision import parse_decision_json

MALFORMED = {
    name: value
    for name, value in json.loads((Path(__file__).parent / "data" / "malformed_decisions.json").read_text()).items()
    if not name.startswith("_")
}


@pytest.mark.parametrize("value", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_decision_is_invalid(value):
    with pytest.raises(PolicyError) as info:
        parse_decision(value)
    assert info.value.code == "policy_invalid_decision"
    assert info.value.detail


def test_undefined_is_invalid():
    with pytest.raises(PolicyError) as info:
        parse_decision(UNDEFINED)
    assert info.value.code == "policy_invalid_decision"
    assert "undefined" in info.value.detail


@pytest.mark.parametrize(
    "value",
    [
        {"decision": "allow"},
        {"decision": "deny", "reasons": ["no"], "audit": "full"},
        {"decision": "allow", "constraints": {"hosts": ["example.com"]}},
        {"decision": "require_approval", "approval": {"groups_any": ["ops"]}},
        {"decision": "require_approval", "approval": {"groups_any": ["a", "b"], "quorum": 10, "ttl_seconds": 86400}},
        {"decision": "require_more_evidence", "evidence": ["ticket_id"]},
    ],
)
def test_well_formed_decision_parses(value):
    decision = parse_decision(value)
    assert decision.model_dump(exclude_defaults=True) == value


def test_defaults_are_minimal_and_empty():
    decision = parse_decision({"decision": "allow"})
    assert (decision.reasons, decision.constraints, decision.approval, decision.evidence, decision.audit) == (
        [],
        {},
        None,
        [],
        "minimal",
    )


def test_decision_is_frozen():
    decision = parse_decision({"decision": "deny"})
    with pytest.raises(Exception):
        decision.decision = "allow"  # type: ignore[misc]


def test_engine_decision_id_is_not_a_policy_field():
    decision = parse_decision({"decision": "allow"})
    tagged = parse_decision({"decision": "allow"}, engine_decision_id="d-1")
    assert (decision.engine_decision_id, tagged.engine_decision_id) == (None, "d-1")
    assert tagged.model_dump() == decision.model_dump()
    assert "engine_decision_id" not in PolicyDecision.model_fields


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_an_engine_decision_id_does_not_make_a_malformed_decision_pass(name):
    with pytest.raises(PolicyError) as info:
        parse_decision(MALFORMED[name], engine_decision_id="d-1")
    assert info.value.code == "policy_invalid_decision"


def test_a_decision_parsed_with_its_engine_id_is_a_new_one_each_time():
    document = {"decision": "require_approval", "approval": {"groups_any": ["ops"]}, "reasons": ["r"]}
    first = parse_decision(document, engine_decision_id="d-1")
    second = parse_decision(document, engine_decision_id="d-2")
    plain = parse_decision(document)
    assert (first.engine_decision_id, second.engine_decision_id, plain.engine_decision_id) == ("d-1", "d-2", None)
    assert first.model_dump() == second.model_dump() == plain.model_dump()
    assert first.reasons is not second.reasons  # nothing shared between the two answers


def test_single_value_of_empty_result_set_is_undefined():
    assert single_value([]) is UNDEFINED


def test_single_value_of_one_result():
    assert single_value([{"expressions": [{"value": {"decision": "allow"}}]}]) == {"decision": "allow"}


@pytest.mark.parametrize(
    "results",
    [
        [{"expressions": [{"value": 1}]}, {"expressions": [{"value": 2}]}],
        [{"expressions": [{"value": 1}, {"value": 2}]}],
        [{"expressions": []}],
        [{}],
        {"expressions": []},
    ],
    ids=["several_results", "several_expressions", "no_expression", "no_expressions_key", "not_a_list"],
)
def test_single_value_rejects_other_result_sets(results):
    with pytest.raises(PolicyError) as info:
        single_value(results)
    assert info.value.code == "policy_invalid_decision"


def test_policy_error_rejects_unknown_code():
    with pytest.raises(ValueError):
        PolicyError("policy_denied")  # type: ignore[arg-type]


# ------------------------------------------------------- parse_decision_json: the same reader

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6), st.sampled_from(["allow", "deny", "require_approval", "require_more_evidence",
                                          "minimal", "full", "ops", ""]),
)
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=8)
_VALID = [
    {"decision": "allow", "reasons": ["read-only tool"], "constraints": {}, "audit": "minimal"},
    {"decision": "deny", "reasons": ["no"], "constraints": {"hosts": ["a.example"]}, "audit": "full"},
    {"decision": "require_approval", "reasons": ["r"], "approval": {"groups_any": ["ops"], "quorum": 2, "ttl_seconds": 900}},
    {"decision": "require_more_evidence", "reasons": [], "evidence": ["ticket_id"]},
]
_near = st.one_of(  # values a lax reader would coerce and a strict one refuses
    _json, st.sampled_from([2.0, "2", True, 1, 0, "", "allow ", b"x".decode(), [], {}, ["ops", 1], [None], {"1": 1}]),
)
_fields = st.sampled_from(["decision", "reasons", "constraints", "approval", "evidence", "audit", "unknown"])
_subfields = st.sampled_from(["groups_any", "quorum", "ttl_seconds", "extra"])


@st.composite
def _documents(draw):
    """A valid decision, then up to two of its fields (or the approval's) changed, added or dropped."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    document = json.loads(json.dumps(draw(st.sampled_from(_VALID))))
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()) and isinstance(document.get("approval"), dict):
            target, key = document["approval"], draw(_subfields)
        else:
            target, key = document, draw(_fields)
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = json.loads(json.dumps(draw(_near)))  # a copy: sampled values are shared
    return document


def _answer(parse, text):
    try:
        return parse(text)
    except PolicyError as exc:
        return exc.code


@settings(max_examples=1500, deadline=None, derandomize=True, database=None)
@given(_documents(), st.booleans())
def test_parse_decision_json_answers_as_parse_decision(document, spaced):
    """The embedded engine reads its answer from JSON text; the answer must be the one
    ``parse_decision`` gives for the same document, decision or refusal."""
    text = json.dumps(document) if spaced else json.dumps(document, separators=(",", ":"))
    expected = _answer(lambda t: parse_decision(json.loads(t)), text)
    assert _answer(parse_decision_json, text) == expected


@pytest.mark.parametrize("text", ['{"decision": "allow"', '{"decision": "allow"} {}', "", "nul", '"<undefined>"x'])
def test_parse_decision_json_refuses_text_that_is_not_json(text):
    with pytest.raises(PolicyError) as info:
        parse_decision_json(text)
    assert info.value.code == "policy_invalid_decision"
