"""``canonical_json`` (the args hash's input) against the ``rfc8785`` package.

The fast path must write exactly the bytes RFC 8785 specifies; values it does not handle
(floats, keys beyond U+FFFF, integers outside ±(2^53 - 1), other types) must reach the
package unchanged, so errors stay the package's.
"""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import arguments
from gateway.arguments import MAX_SAFE_INTEGER, canonical_json

# every kind of character the two could escape or order differently: controls, quotes,
# backslash, DEL, line separators, BMP above the surrogates, astral
_chars = st.one_of(
    st.characters(max_codepoint=0x7F),
    st.sampled_from(['"', "\\", "\x7f", "\u2028", "\u2029", "\ufeff", "\uffff", "\ue000", "é", "😀", "\U00010000"]),
    st.characters(blacklist_categories=("Cs",)),
)
_text = st.text(_chars, max_size=12)
_ints = st.one_of(st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER), st.sampled_from([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0]))
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.one_of(st.none(), st.booleans(), _ints, _text, _floats)
_json = st.recursive(
    _scalars, lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_text, inner, max_size=5)), max_leaves=30
)


@settings(max_examples=1000, deadline=None, derandomize=True, database=None)
@given(value=st.dictionaries(_text, _json, max_size=6))
def test_canonical_json_is_rfc8785(value):
    assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "😀": 2},  # code points order 😀 last, UTF-16 units order it first
        {"a": 1.0, "b": 1e21, "c": 1e-7, "d": -0.0, "e": 0.1},  # ECMAScript number forms
        {"n": MAX_SAFE_INTEGER, "m": -MAX_SAFE_INTEGER},
        {"s": "\x00\x08\t\n\x0b\x0c\r\x1f\"\\/\x7f"},
        {"nested": [{"z": [], "a": {}}, [None, True, False]]},
    ],
)
def test_edge_values(value):
    assert canonical_json(value) == rfc8785.dumps(value)


def test_the_fast_path_is_taken_only_for_plain_values(monkeypatch):
    calls = []
    real = rfc8785.dumps
    monkeypatch.setattr(arguments.rfc8785, "dumps", lambda v: calls.append(v) or real(v))
    canonical_json({"a": [1, "x", None, True, {"b": -3}]})
    assert calls == []
    for other in ({"f": 0.5}, {"😀": 1}, {"big": MAX_SAFE_INTEGER + 1}, {"t": (1, 2)}, {1: "x"}):
        try:
            canonical_json(other)
        except Exception:
            pass
    assert len(calls) == 5


@pytest.mark.parametrize("value", [{"big": MAX_SAFE_INTEGER + 1}, {"lone": "\ud800"}, {1: "int key"}, {"nan": float("nan")}])
def test_what_rfc8785_refuses_is_still_refused(value):
    with pytest.raises(Exception) as fast:
        canonical_json(value)
    with pytest.raises(Exception) as package:
        rfc8785.dumps(value)
    assert type(fast.value) is type(package.value)
