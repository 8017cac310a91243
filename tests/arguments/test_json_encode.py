"""gateway.json_encode.encoder writes what json.dumps writes with the same options."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.json_encode import encoder

OPTIONS = {  # every option set the gateway uses, and json.dumps's defaults
    "defaults": {},
    "canonical": dict(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False),
    "data": dict(ensure_ascii=False, separators=(",", ":")),
    "outcome": dict(separators=(",", ":"), default=str),
    "audit": dict(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str),
    "policy_input": dict(separators=(",", ":"), ensure_ascii=False, allow_nan=False),
}
ENCODERS = {name: encoder(**options) for name, options in OPTIONS.items()}

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**80), 2**80), st.floats(), st.text(max_size=8),
    st.sampled_from(["é", "\u2028", "\x00", "😀", '"\\', "\ud800"]),
)
_keys = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.none(),
                  st.floats(allow_nan=False, allow_infinity=False))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=20,
)


def _answer(encode, value):
    try:
        return encode(value)
    except (TypeError, ValueError) as exc:
        return type(exc)


@settings(max_examples=800, deadline=None, derandomize=True, database=None)
@given(_values, st.sampled_from(sorted(OPTIONS)))
def test_same_text_or_refusal_as_json_dumps(value, name):
    try:
        expected = _answer(lambda v: json.dumps(v, **OPTIONS[name]), value)
    except TypeError:  # json.dumps cannot sort keys of mixed types: nor can the encoder
        with pytest.raises(TypeError):
            ENCODERS[name](value)
        return
    assert _answer(ENCODERS[name], value) == expected


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("value", [
    {"x": math.nan}, [math.inf], {"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}, {(1, 2): 1}, {math.inf: 1},
    {"t": datetime(2026, 11, 22, tzinfo=timezone.utc)}, "plain", "é", 7, 1.5, None, True,
])
def test_edge_values_as_json_dumps(name, value):
    assert _answer(ENCODERS[name], value) == _answer(lambda v: json.dumps(v, **OPTIONS[name]), value)


def test_a_cyclic_value_is_refused_and_the_next_value_still_encodes():
    cyclic: dict = {}
    cyclic["self"] = cyclic
    encode = ENCODERS["policy_input"]
    with pytest.raises(RecursionError):
        encode({"input": cyclic})
    assert encode({"a": [1, {"b": "c"}]}) == '{"a":[1,{"b":"c"}]}'
