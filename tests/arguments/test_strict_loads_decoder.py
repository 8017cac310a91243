"""``strict_loads`` (OPA's answers, the audit anchor, a model's tool arguments) decodes with one
JSON decoder built once, not ``json.loads`` with hooks (which builds one per call). It must
answer every input as ``json.loads`` with the same hooks did: the same value, or the same
refusal. Bytes in each encoding ``json.loads`` detects, byte order marks, lone surrogates and
``bytearray`` included."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import json_keys
from gateway.json_keys import DuplicateKey, NotStrictJson, strict_loads, unique_pairs


def _answer(raw: object) -> object:
    try:
        value = strict_loads(raw)  # type: ignore[arg-type]
    except NotStrictJson as exc:
        return ("refused", str(exc))
    except TypeError as exc:
        return ("type", str(exc))
    return ("value", json.dumps(value, sort_keys=True))  # NaN-free by construction; -0.0 stays -0.0


def _answer_by_json_loads(raw: object) -> object:
    """What strict_loads answered when each read was json.loads with its hooks."""
    def loads(text: object) -> object:
        try:
            return json.loads(text, object_pairs_hook=unique_pairs,  # type: ignore[arg-type]
                              parse_constant=json_keys._constant, parse_float=json_keys._finite)
        except NotStrictJson:
            raise
        except DuplicateKey as exc:
            raise NotStrictJson(str(exc)) from None
        except RecursionError:
            raise NotStrictJson("nested too deeply to read") from None
        except ValueError as exc:
            raise NotStrictJson(f"not JSON ({exc})") from None

    try:
        value = loads(raw)
    except NotStrictJson as exc:
        return ("refused", str(exc))
    except TypeError as exc:
        return ("type", str(exc))
    return ("value", json.dumps(value, sort_keys=True))


_pieces = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"a"', '"b"', "1", "1.5", "-0.0", "1e400", "-1e400", "NaN", "Infinity",
    "9007199254740993", "true", "null", " ", "\n", "\ufeff", '"\\ud800"', '"x\\u0000"', '"ü"', "é",
])
_encodings = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                              "utf-32-be"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_pieces, max_size=14).map("".join))
def test_each_text_is_answered_as_json_loads_answered_it(text):
    assert _answer(text) == _answer_by_json_loads(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(_pieces, max_size=14).map("".join), _encodings, st.booleans())
def test_each_byte_string_is_answered_as_json_loads_answered_it(text, encoding, as_bytearray):
    try:
        raw: bytes | bytearray = text.encode(encoding)
    except UnicodeEncodeError:  # a lone surrogate written out: the escapes stay
        raw = text.encode(encoding, "surrogatepass") if "utf-8" not in encoding else text.encode("utf-8", "replace")
    if as_bytearray:
        raw = bytearray(raw)
    assert _answer(raw) == _answer_by_json_loads(raw)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=24))
def test_any_bytes_are_answered_as_json_loads_answered_them(raw):
    assert _answer(raw) == _answer_by_json_loads(raw)


@pytest.mark.parametrize("raw", [
    '{"decision": "deny", "decision": "allow"}', b'{"result": {"a": 1, "a": 1}}', "NaN", b"[1e400]",
    "\ufeff{}", "[" * 100_000 + "]" * 100_000, b'{"a": "\xff"}',
])
def test_the_refusals_are_still_refusals(raw):
    with pytest.raises(NotStrictJson):
        strict_loads(raw)


@pytest.mark.parametrize("raw", [None, 1, {"a": 1}, memoryview(b"{}")])
def test_what_is_not_text_or_bytes_is_a_type_error(raw):  # as json.loads: its caller's mistake, not the text's
    with pytest.raises(TypeError) as info:
        strict_loads(raw)
    assert _answer_by_json_loads(raw) == ("type", str(info.value))


def test_bytes_with_a_byte_order_mark_are_read_as_json_loads_reads_them():
    assert strict_loads(b"\xef\xbb\xbf{}") == strict_loads(b"\xff\xfe{\x00}\x00") == {}  # the mark names the encoding


def test_values_read_the_same_in_every_detected_encoding():
    document = {"result": {"decision": "allow", "reasons": ["ü", "\u2028"], "n": -0.0, "big": 2**70}}
    for encoding in ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
        value = strict_loads(json.dumps(document, ensure_ascii=False).encode(encoding))
        assert value == document and math.copysign(1, value["result"]["n"]) == -1
