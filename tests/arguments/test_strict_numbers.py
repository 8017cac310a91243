"""Numbers after strict parsing: the value hashed is the value handed on, and no literal crashes.

RFC 8785 writes ``1.0`` as ``1`` and ``-0.0`` as ``0``: ``{"id": 1}`` and ``{"id": 1.0}`` have
one args hash, and the approver is shown ``1``. So arguments and evidence come back with
such numbers as ints, and a tool never sees ``"1.0"``. An integer literal too long for
±(2^53 - 1) — including one past Python's 4,300-digit ``int()`` limit — is an ArgumentsError.
"""

from __future__ import annotations

import math

import pytest

from gateway.arguments import ArgumentsError, args_hash, canonical_json, parse_strict

MAX = 2**53 - 1


@pytest.mark.parametrize("literal, value", [
    ("1.0", 1), ("-0.0", 0), ("0.0", 0), ("1e3", 1000), ("1E+2", 100), ("-2.50e1", -25),
    ("9007199254740991.0", MAX), ("-9007199254740991.0", -MAX), ("0.000e-5", 0),
])
def test_an_integral_number_is_parsed_as_the_int_rfc8785_writes(literal, value):
    args = parse_strict(f'{{"n": {literal}}}'.encode(), max_bytes=1024)
    assert type(args["n"]) is int and args["n"] == value
    assert canonical_json(args) == f'{{"n":{value}}}'.encode()


@pytest.mark.parametrize("literal", ["0.5", "-1.25", "1e300", "9007199254740992.0", "1e-7"])
def test_other_numbers_stay_floats(literal):
    args = parse_strict(f'{{"n": {literal}}}'.encode(), max_bytes=1024)
    assert type(args["n"]) is float and args["n"] == float(literal)


def test_negative_zero_does_not_survive_anywhere_in_the_arguments():
    args = parse_strict(b'{"a": [-0.0, {"b": -0.0}], "c": -0}', max_bytes=1024)
    assert args == {"a": [0, {"b": 0}], "c": 0}
    assert all(math.copysign(1, x) == 1 for x in (args["a"][0], args["a"][1]["b"], args["c"]))


def test_spellings_of_one_value_parse_to_one_python_value_with_one_hash():
    a = parse_strict(b'{"id": 1, "z": 0}', max_bytes=1024)
    b = parse_strict(b'{"id": 1.0, "z": -0.0}', max_bytes=1024)
    c = parse_strict(b'{"id": 10e-1, "z": 0e5}', max_bytes=1024)
    assert repr(a) == repr(b) == repr(c)
    assert args_hash(a) == args_hash(b) == args_hash(c)


def test_evidence_is_normalized_like_arguments():
    assert parse_strict(b'{"n": 2.0}', max_bytes=1024, what="evidence") == {"n": 2}
    assert type(parse_strict(b'{"n": 2.0}', max_bytes=1024, what="evidence")["n"]) is int


def test_token_claims_keep_the_type_as_written():
    """Token checks refuse ``"iat": 1.0``; parsing must not turn it into an int for them."""
    assert type(parse_strict(b'{"iat": 1700000000.0}', max_bytes=1024, numbers_as_hashed=False)["iat"]) is float
    assert type(parse_strict(b'{"alg": 1.0}', max_bytes=1024, numbers_as_hashed=False)["alg"]) is float


@pytest.mark.parametrize("digits", [17, 4300, 4301, 100_000])
@pytest.mark.parametrize("sign", ["", "-"])
@pytest.mark.parametrize("what", ["arguments", "evidence", "claims"])
def test_an_overlong_integer_is_an_arguments_error(digits, sign, what):
    raw = b'{"n": ' + sign.encode() + b"1" * digits + b"}"
    with pytest.raises(ArgumentsError) as caught:
        parse_strict(raw, max_bytes=1 << 20, what=what)
    (error,) = caught.value.errors
    assert "outside ±(2^53-1)" in error.message and len(error.message) < 120


def test_the_16_digit_boundary_is_exact():
    assert parse_strict(b'{"n": -9007199254740991}', max_bytes=1024) == {"n": -MAX}
    with pytest.raises(ArgumentsError):
        parse_strict(b'{"n": 9007199254740993}', max_bytes=1024)  # a double would round it
    with pytest.raises(ArgumentsError):
        parse_strict(b'{"n": 9999999999999999}', max_bytes=1024)
    for claims in (b'{"n": 9007199254740992}', b'{"n": 100000000000000000000}'):  # token claims: as before
        with pytest.raises(ArgumentsError, match="outside"):
            parse_strict(claims, max_bytes=1024, numbers_as_hashed=False)


@pytest.mark.parametrize("number", [2.0**53, -(2.0**53), 2.0**53 + 2, 1e20, -1e20, 1.2345678901234567e20, 9.99e20,
                                    2.0**69])
def test_the_canonical_text_of_a_double_past_2_53_parses_back_to_it(number):
    """RFC 8785 writes these without an exponent; arguments in canonical form (what an approver's
    CLI reads) must parse back to the hashed value, not be refused as unsafe integers."""
    canonical = canonical_json({"n": number})
    assert b"e" not in canonical
    parsed = parse_strict(canonical, max_bytes=1024)
    assert parsed == {"n": number} and type(parsed["n"]) is float
    assert args_hash(parsed) == args_hash({"n": number})


@pytest.mark.parametrize("literal", ["9007199254740993", "100000000000000000001", "10000000000000000000000",
                                     "123456789012345678901", "-9007199254740995"])
def test_an_integer_literal_that_is_not_the_text_of_a_double_is_refused(literal):
    with pytest.raises(ArgumentsError, match="outside ±\\(2\\^53-1\\)"):
        parse_strict(b'{"n": ' + literal.encode() + b"}", max_bytes=1024)


@pytest.mark.parametrize(("raw", "message"), [
    (b'{"a": "x\x01"}', "not valid JSON: Invalid control character at line 1 column 9"),
    (b'{"a": 1,}', "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 9"),
])
def test_a_json_syntax_error_reads_as_one_sentence(raw, message):
    with pytest.raises(ArgumentsError) as caught:
        parse_strict(raw, max_bytes=1024)
    assert [e.message for e in caught.value.errors] == [message]
