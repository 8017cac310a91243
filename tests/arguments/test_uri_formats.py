"""``iri``, ``iri-reference`` and ``uri-template`` (gateway.uri_formats), and every format's cost.

A format checker runs on the agent's strings, so each one must be right and linear. The IRI
checkers are held to RFC 3986's grammar (``rfc3986_validator``, which jsonschema uses for
``uri``) on generated references: on ASCII an IRI is a URI, and a ``ucschar`` is valid exactly
where a percent-encoded octet is. The template checker is held to RFC 6570's examples.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rfc3986_validator import validate_rfc3986

from gateway.arguments import MAX_FIELD_MESSAGE, SchemaValidator
from gateway.ecma_regex import FORMATS, MAX_ALTERNATIVES
from gateway.uri_formats import is_iri, is_iri_reference, is_uri_template
from tests._timing import Timings, cpu_seconds, least_times

VALID_IRIS = [
    "http://example.com/", "https://exämple.com/ä?ö=ü#ß", "http://[::1]/", "http://[fe80::1]/",
    "http://[::ffff:192.0.2.1]:8080/a", "http://[1:2:3:4:5:6:7:8]/", "http://[1:2:3:4:5:6:7::]/", "http://[v7.a:b]/",
    "http://[V1F.x]/", "http://user:pa%20ss@host:80/p", "mailto:a@example.com", "urn:isbn:0451450523", "a:",
    "file:///etc/hosts", "http://example.com/\U00010000", "http://a/?\ue000", "x:/", "x:a/b//c", "http://a:/",
    "http://192.168.0.1/", "http://a/%7e",
]
INVALID_IRIS = [
    "", "//a", "/a", "a", "1a:b", "http://a b/", "http://a/%4", "http://a/%zz", "http://[::1/", "http://[1:2]/",
    "http://[::1::2]/", "http://a:80x/", "http://a/#\ue000", "http://a/\ue000?", "http://a/<", "http://a/\\",
    "http://a/\x00", "http://a/\ud800", "http://a@b@c/", "http://[v.a]/", "http://[vz.a]/", "ht tp://a",
]
VALID_REFERENCES = ["", "#f", "?q", "//a", "/a", "a", "./x:y", "a/b:c", "%41", "ä/ö", "//[::1]", "../..", "//@"]
INVALID_REFERENCES = ["x y", "a:b c", "%", "[::1]", "a#b#c", ":a", "//a/\\"]


@pytest.mark.parametrize("value", VALID_IRIS)
def test_an_iri_is_accepted(value):
    assert is_iri(value) and is_iri_reference(value)


@pytest.mark.parametrize("value", INVALID_IRIS)
def test_a_non_iri_is_refused(value):
    assert not is_iri(value)


@pytest.mark.parametrize("value", VALID_REFERENCES)
def test_a_relative_reference_is_accepted(value):
    assert is_iri_reference(value) and not is_iri(value)


@pytest.mark.parametrize("value", INVALID_REFERENCES)
def test_a_non_reference_is_refused(value):
    assert not is_iri_reference(value)


_PIECES = ["http", "x", "a", "Z", "9", "1", "25", "255.", "0.0.0.0", "fe80", "ff:", "v1.", "://", ":", "::", "/", "//",
           "?", "#", "@", "[", "]", "%41", "%4", "%", "!", "'", "(", "-", ".", "..", "~", "+", "=", "_", " ", "\\", "{",
           "}", "|", "^", "`", '"', "<", ">", "\t"]
_UCS = ["é", "ü", "\u00a0", "\ud7ff", "\uf900", "\ufdcf", "\ufdf0", "\uffef", "\U00010000", "\U000e1000", "\U000efffd"]


def _as_uri(value: str) -> str:
    """Each ``ucschar`` as one percent-encoded octet: valid where it was, invalid where it was not."""
    return "".join("%41" if ch in _UCS else ch for ch in value)


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_on_ascii_an_iri_is_a_uri(value):
    assert is_iri(value) == bool(validate_rfc3986(value, rule="URI"))
    assert is_iri_reference(value) == bool(validate_rfc3986(value, rule="URI_reference"))


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(_PIECES + _UCS), max_size=12).map("".join))
def test_a_ucschar_is_valid_where_a_percent_encoded_octet_is(value):
    assert is_iri(value) == bool(validate_rfc3986(_as_uri(value), rule="URI"))
    assert is_iri_reference(value) == bool(validate_rfc3986(_as_uri(value), rule="URI_reference"))


def test_characters_outside_ucschar_are_refused():
    for ch in ["\x7f", "\x9f", "\ud800", "\ufdef", "\ufff0", "\U0001fffe", "\U000e0fff", "\U000f0000"]:
        assert not is_iri(f"http://a/{ch}"), repr(ch)
    assert is_iri("http://a/?\U000f0000") and is_iri("http://a/?\U0010fffd")  # iprivate: in the query only


# RFC 6570, section 1.2 and 3.2: every expression form of every level
VALID_TEMPLATES = [
    "", "http://example.com/~{username}/", "http://example.com/dictionary/{term:1}/{term}", "{var}", "{+path}/here",
    "X{#var}", "X{.x,y}", "{/var:1,var}", "{;x,y,empty}", "{?x,y}", "?fixed=yes{&x}", "{keys*}", "{+keys*}", "{var:30}",
    "{var:9999}", "{a.b.c}", "{%41b}", "{a_1}", "dictionary/{term:1}/{term}", "%41{x}%42", "ä{x}\ue000",
]
INVALID_TEMPLATES = [
    "{", "}", "{}", "{var", "var}", "{var:0}", "{var:10000}", "{var*:3}", "{.}", "{a..b}", "{a.}",
    "{=x}", "{,x}", "{!x}", "{@x}", "{|x}", "{x,}", "{x y}", "{{x}}", "a b", "<", "%", "%4", "'", "\\", "^", "`", "|",
]


@pytest.mark.parametrize("value", VALID_TEMPLATES)
def test_a_uri_template_is_accepted(value):
    assert is_uri_template(value)


@pytest.mark.parametrize("value", INVALID_TEMPLATES)
def test_a_non_template_is_refused(value):
    """Including the operators RFC 6570 reserves for future extensions (``= , ! @ |``): no processor
    can expand them."""
    assert not is_uri_template(value)


def test_the_gateway_validator_uses_these_checkers():
    for fmt, good, bad in [("iri", "http://[::1]/", "http://a b/"), ("iri-reference", "//[::1]", "x y"),
                           ("uri-template", "{x}", "{x")]:
        v = SchemaValidator.compile({"type": "object", "properties": {"x": {"format": fmt}}})  # a non-string passes a format
        assert v.errors({"x": good}) == [] and v.errors({"x": 5}) == []
        assert [e.path for e in v.errors({"x": bad})] == ["/x"]


def test_a_field_error_quotes_a_long_value_only_in_part():
    v = SchemaValidator.compile({"type": "object", "properties": {"x": {"format": "iri"}}})
    [error] = v.errors({"x": "b" * 100_000})
    assert error.path == "/x" and len(error.message) < MAX_FIELD_MESSAGE + 40
    assert error.message.startswith("'bbb") and error.message.endswith("bbb' is not a 'iri'")
    assert "…[99,717 characters left out]…" in error.message


# -- cost ------------------------------------------------------------------------------------

_ADVERSARIAL = {
    "letters": lambda n: "a" * n, "digits": lambda n: "1" * n, "dots": lambda n: "a." * (n // 2),
    "colons": lambda n: "1:" * (n // 2), "percent": lambda n: "%41" * (n // 3), "path": lambda n: "http://a/" + "a" * n,
    "host": lambda n: "http://" + "a" * n + "/", "dashes": lambda n: "a-" * (n // 2) + "!", "ats": lambda n: "a@" * (n // 2),
    "slashes": lambda n: "/" * n, "braces": lambda n: "{" * n, "template": lambda n: "{" + "a," * (n // 2) + "}}",
    "duration": lambda n: "P" + "1Y" * (n // 2), "fraction": lambda n: "2020-01-01T00:00:00." + "1" * n + "Z",
    "email": lambda n: "a" * (n // 2) + "@" + "b" * (n // 2) + ".c!", "spaces": lambda n: " " * n + "x",
    "non-ascii": lambda n: "a:" + "é" * n + "\x00", "groups": lambda n: "(a)" * (n // 3),
}


SIZES = [2_000, 4_000, 8_000, 16_000, 32_000]
LIMIT_EXPONENT = 1.5
"""Fitted over 16x the length: linear time gives about 1, quadratic 2. 1.5 catches a quadratic term
as small as the ratio limit of 10 between 8,000 and 32,000 characters did (one as large as the
linear term at 8,000), with more room for a linear checker's noise or a step in its cost at one size."""
FLOOR_SECONDS = 0.001
"""Below this on 32,000 characters the growth is not judged (the smallest sizes then take microseconds)."""


def _timings(fmt: str, make) -> Timings:
    values = {n: make(n) for n in SIZES}

    def check(value: str) -> None:
        try:
            FORMATS.check(value, fmt)
        except Exception:  # noqa: BLE001 - a refusal is as good as a pass here: only the time counts
            pass

    return least_times(lambda n: cpu_seconds(check, values[n]), SIZES,
                       lambda t: t.seconds[-1] < FLOOR_SECONDS or t.exponent < LIMIT_EXPONENT, budget=2.0, give_up=0.5)


@pytest.mark.parametrize("fmt", sorted(FORMATS.checkers))
def test_every_format_checker_is_linear_on_adversarial_strings(fmt):
    """The agent picks the string: its time must grow about linearly in its length (super-linear
    checkers, as the iri and uri-template ones before, grow 16x and more for 4x the length).
    CPU time, least of interleaved rounds (``tests._timing``)."""
    for name, make in _ADVERSARIAL.items():
        timings = _timings(fmt, make)
        assert timings.seconds[-1] < 0.5, f"{fmt} on {name}: over 0.5 s for 32,000 characters: {timings}"
        if timings.seconds[-1] >= FLOOR_SECONDS:
            assert timings.exponent < LIMIT_EXPONENT, f"{fmt} on {name}: super-linear: {timings}"


def test_a_regex_value_with_too_many_alternatives_is_refused_not_a_crash():
    """regress overflows the stack (a segfault) on ~45,000 alternatives; an agent may send that
    as a ``format: regex`` argument. Run in a subprocess so a regression fails instead of killing pytest."""
    code = (
        "from gateway.ecma_regex import FORMATS\n"
        "from jsonschema.exceptions import FormatError\n"
        f"for value in ('a|' * 60000, '(?:' + 'a|' * 60000 + 'b)', '|' * 256000):\n"
        "    try:\n"
        "        FORMATS.check(value, 'regex')\n"
        "    except FormatError as exc:\n"
        "        assert 'alternatives' in str(exc.cause), exc.cause\n"
        "    else:\n"
        "        raise SystemExit('accepted')\n"
        f"FORMATS.check('|'.join(['a'] * ({MAX_ALTERNATIVES} + 1)), 'regex')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
