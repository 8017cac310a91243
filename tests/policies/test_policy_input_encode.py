"""policies._encode.encode_json: orjson's speed, the standard library's answers.

It must refuse exactly what ``json.dumps(separators=(",", ":"), ensure_ascii=False,
allow_nan=False).encode()`` refuses, with the same exception type, and otherwise write JSON of the
same value. The input a gateway builds must take the fast path (or the saving is gone).
"""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections import OrderedDict
from datetime import datetime, timezone

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import policy as policy_stage
from gateway.config import ToolConfig
from gateway.models import CallContext, Identity, ToolCall
from gateway.tools import ToolRegistry
from policies import _encode
from policies._encode import encode_json


def _standard(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _answer(encode, value):
    """The value the bytes hold, re-written by the standard library (so ``1e16`` and ``1e+16``
    read alike and ``1`` and ``1.0`` do not), or the type of the refusal."""
    try:
        return json.dumps(json.loads(encode(value)))
    except (TypeError, ValueError, RecursionError) as exc:
        return type(exc)


class Text(str):
    pass


class Number(int):
    pass


class Mapping(dict):
    pass


class Level(enum.IntEnum):
    LOW = 1


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**80), 2**80), st.floats(), st.text(max_size=8),
    st.sampled_from(["é", "\u2028", "\x00", "😀", '"\\', "\ud800", "null", Text("sub"), Number(3), Level.LOW]),
)
_keys = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.none(),
                  st.floats(allow_nan=False, allow_infinity=False), st.just(Text("k")))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(_keys, inner, max_size=4),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3).map(Mapping)),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None, derandomize=True, database=None)
@given(_values)
def test_same_value_or_the_same_refusal_as_the_standard_library(value):
    assert _answer(encode_json, value) == _answer(_standard, value)


@pytest.mark.parametrize("value", [
    {"x": math.nan}, {"a": [1, {"b": -math.inf}]}, [math.inf], {"x": object()}, {"x": {1, 2}}, {"x": b"bytes"},
    {(1, 2): 1}, {math.inf: 1}, {"t": datetime(2026, 11, 22, tzinfo=timezone.utc)}, {"s": "\ud800"},
    {"big": 2**70, "neg": -(2**64)}, {1: "one", None: "none", True: "yes"}, {"sub": Text("x"), "n": Number(2)},
    OrderedDict(a=1), Mapping(a=[Level.LOW]), {"f": 1e16, "g": -0.0, "h": 1.0}, "plain", None, True,
])
def test_edge_values_as_the_standard_library(value):
    assert _answer(encode_json, value) == _answer(_standard, value)


def test_nan_or_infinity_is_refused_though_orjson_would_write_null():
    assert orjson.dumps({"x": math.nan}) == b'{"x":null}'  # why the module looks for null
    with pytest.raises(ValueError):
        encode_json({"args": {"limit": math.nan}})
    with pytest.raises(ValueError):
        encode_json({"args": [None, math.inf]})


def test_a_cyclic_or_very_deep_value():
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(RecursionError):
        encode_json({"input": cyclic})
    deep: list = []
    for _ in range(400):  # past orjson's limit, within the standard library's
        deep = [deep]
    assert json.loads(encode_json(deep)) == json.loads(_standard(deep))


def test_what_orjson_writes_and_the_standard_library_refuses_is_known():
    """The one difference the module docstring names: the gateway's input holds neither."""

    class Colour(enum.Enum):
        RED = "red"

    for value in (uuid.UUID(int=1), Colour.RED):
        with pytest.raises(TypeError):
            _standard(value)
        assert json.loads(encode_json(value)) in (str(uuid.UUID(int=1)), "red")


def _context(constraints):
    tools = ToolRegistry([ToolConfig.model_validate({
        "name": "lookup", "risk": {"side_effect": "read"}, "constraints": constraints,
        "labels": ["a"], "input_schema": {"type": "object"},
        "executor": {"kind": "python", "callable": "gateway.builtin_tools:echo"},
    })])
    ctx = CallContext("d-1", Identity("acme", "agent-1", "u-1"), ToolCall("lookup", b"{}", run_id="r-1", step=2), 0.0)
    ctx.tool, ctx.args, ctx.args_hash = tools.resolve("lookup"), {"q": "x", "n": 3, "tags": ["a"]}, "sha256:00"
    ctx.evidence = {"ticket_id": "T-1"}
    return ctx


def test_the_input_a_gateway_builds_takes_the_fast_path(monkeypatch):
    calls = []
    monkeypatch.setattr(_encode, "_STANDARD", lambda value: calls.append(value) or _standard(value).decode())
    doc = policy_stage.build_input(_context({"hosts": ["api.example.com"], "max": 5, "nested": {"ok": True}}), "gw-1")
    assert json.loads(encode_json(doc)) == json.loads(_standard(doc))
    assert calls == []


def test_an_input_holding_null_is_written_by_the_standard_encoder(monkeypatch):
    calls = []
    monkeypatch.setattr(_encode, "_STANDARD", lambda value: calls.append(value) or _standard(value).decode())
    ctx = _context({})
    ctx.args = {"q": None}
    doc = policy_stage.build_input(ctx, "gw-1")
    assert json.loads(encode_json(doc)) == json.loads(_standard(doc))
    assert calls == [doc]
