"""``parse_strict`` decodes with two JSON decoders built once, not ``json.loads`` (which builds one
per call). It must answer every text as it did with ``json.loads`` and the same hooks: the same
value, or the same refusal — a byte-order mark in front included, which ``json.loads`` refuses
before it decodes anything."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import arguments
from gateway.arguments import ArgumentsError, parse_strict
from gateway.json_keys import unique_pairs


def _answer(raw: bytes, numbers_as_hashed: bool) -> object:
    try:
        return parse_strict(raw, max_bytes=1 << 16, numbers_as_hashed=numbers_as_hashed)
    except ArgumentsError as exc:
        return [(e.path, e.message) for e in exc.errors]


def _answer_by_json_loads(raw: bytes, numbers_as_hashed: bool) -> object:
    """parse_strict with each decode done by json.loads and its hooks, as it was."""
    hooks = dict(
        object_pairs_hook=unique_pairs,
        parse_int=arguments._hashed_int if numbers_as_hashed else arguments._int,
        parse_float=arguments._number if numbers_as_hashed else arguments._float,
        parse_constant=arguments._constant,
    )
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(arguments, "_AS_HASHED" if numbers_as_hashed else "_AS_WRITTEN",
                        lambda text: json.loads(text, **hooks))
        return _answer(raw, numbers_as_hashed)


_pieces = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"a"', '"b"', "1", "1.0", "-0.0", "1e400", "NaN", "-Infinity",
    "9007199254740993", "100000000000000000000", "true", "null", " ", "\ufeff", '"\\ud800"', '"x\\u0000"',
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_pieces, max_size=14).map("".join), st.booleans())
def test_each_text_is_answered_as_json_loads_answered_it(text, numbers_as_hashed):
    raw = text.encode()
    assert _answer(raw, numbers_as_hashed) == _answer_by_json_loads(raw, numbers_as_hashed)


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers(-2**60, 2**60) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
), st.booleans())
def test_each_document_is_answered_as_json_loads_answered_it(value, numbers_as_hashed):
    raw = json.dumps({"v": value}).encode()
    assert _answer(raw, numbers_as_hashed) == _answer_by_json_loads(raw, numbers_as_hashed)


@pytest.mark.parametrize("numbers_as_hashed", [True, False])
def test_a_byte_order_mark_in_front_is_refused_as_json_loads_refuses_it(numbers_as_hashed):
    with pytest.raises(json.JSONDecodeError) as by_json:
        json.loads('\ufeff{"a": 1}')
    with pytest.raises(ArgumentsError) as refused:
        parse_strict('\ufeff{"a": 1}'.encode(), max_bytes=1024, numbers_as_hashed=numbers_as_hashed)
    assert refused.value.errors[0].message == f"not valid JSON: {by_json.value.msg} at line 1 column 1"
