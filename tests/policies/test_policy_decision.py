"""parse_decision reads the decision document strictly: every malformed shape denies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policies import UNDEFINED, PolicyDecision, PolicyError, parse_decision, single_value

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
    tagged = decision.with_engine_decision_id("d-1")
    assert (decision.engine_decision_id, tagged.engine_decision_id) == (None, "d-1")
    assert tagged.model_dump() == decision.model_dump()
    assert "engine_decision_id" not in PolicyDecision.model_fields


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
