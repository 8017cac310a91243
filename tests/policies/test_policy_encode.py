"""encode_json writes the policy input as json.dumps would, and refuses what it refuses."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies._encode import encode_json


def _dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_keys = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.none(),
                  st.floats(allow_nan=False, allow_infinity=False))
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**80), 2**80), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None, derandomize=True, database=None)
@given(_values)
def test_same_text_as_json_dumps(value):
    assert encode_json(value) == _dumps(value)


@pytest.mark.parametrize("value", [
    {"x": math.nan}, {"x": math.inf}, [-math.inf], {"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}, {(1, 2): 1}, {math.inf: 1},
    "plain", 7, None,
])
def test_same_answer_or_refusal_as_json_dumps(value):
    try:
        expected = _dumps(value)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            encode_json(value)
    else:
        assert encode_json(value) == expected


def test_a_cyclic_value_is_refused_and_the_next_value_still_encodes():
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(RecursionError):
        encode_json({"input": cyclic})
    assert encode_json({"a": [1, {"b": "c"}]}) == '{"a":[1,{"b":"c"}]}'


def test_a_lone_surrogate_is_written_as_is_so_utf8_refuses_it():
    assert encode_json({"x": "\ud800"}) == _dumps({"x": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        encode_json({"x": "\ud800"}).encode()
