import base64
import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.scrub import REDACTED, Scrubber
from tests.executors._helpers import nested

SECRET = "s3cr3t/Tok+en=with?odd&chars"


def _forms(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "raw": secret,
        "b64": base64.b64encode(raw).decode(),
        "b64_nopad": base64.b64encode(raw).decode().rstrip("="),
        "b64url": base64.urlsafe_b64encode(raw).decode(),
        "b64url_nopad": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "quote": quote(secret, safe=""),
        "quote_plus": quote_plus(secret),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "json_escaped": json.dumps(secret)[1:-1],
    }


@pytest.mark.parametrize("form", list(_forms(SECRET)))
def test_every_encoded_form_is_removed(form):
    encoded = _forms(SECRET)[form]
    text, n = Scrubber([SECRET]).text(f"before {encoded} after")
    assert encoded not in text and n >= 1
    assert text.startswith("before ") and text.endswith(" after")


@pytest.mark.parametrize("prefix", [b"", b"x", b"xy", b"Authorization: Bearer "])
def test_secret_inside_a_larger_base64_blob_is_removed(prefix):
    blob = base64.b64encode(prefix + SECRET.encode() + b" trailing bytes").decode()
    start = -(-8 * len(prefix) // 6)
    end = 8 * (len(prefix) + len(SECRET)) // 6
    secret_chars = blob[start:end]  # the characters that encode only the secret's bits
    text, n = Scrubber([SECRET]).text(blob)
    assert n >= 1
    assert secret_chars not in text and secret_chars[4:-4] not in text


def test_json_keys_and_values_are_walked():
    data = {"token": SECRET, SECRET: 1, "nested": [{"x": f"pre{SECRET}post"}, 3, True, None]}
    clean, n = Scrubber([SECRET]).data(data)
    assert SECRET not in json.dumps(clean)
    assert n == 3
    assert clean["nested"][1:] == [3, True, None]


def test_colliding_scrubbed_keys_are_kept_apart():
    clean, _ = Scrubber(["aaaaaaaa", "bbbbbbbb"]).data({"aaaaaaaa": 1, "bbbbbbbb": 2})
    assert sorted(clean.values()) == [1, 2]


@pytest.mark.parametrize("sample", [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n",
    "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ghp_" + "a" * 36,
    "xoxb-1234567890-abcdefghij",
    "Authorization: Bearer abcdefghijklmnop.qrstu",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "https://user:hunter2hunter2@db.internal/x",
])
def test_common_secret_shapes_are_removed_without_knowing_them(sample):
    text, n = Scrubber().text(f"log: {sample} end")
    assert n >= 1 and REDACTED in text
    secretish = sample.split()[-1].split("@")[0][-10:]
    assert secretish not in text


def test_ordinary_text_is_untouched():
    text = "The quick brown fox; status 200; user=alice; path /v1/items?limit=10"
    assert Scrubber(["unrelated-secret-value"]).text(text) == (text, 0)


def test_numbers_are_left_alone_unless_they_hold_a_numeric_secret():
    data = {"n": 12345679, "f": 1.5, "ok": True, "secret": 12345678, "inside": 9123456780, "float": 12345678.0}
    clean, n = Scrubber(["12345678", "not-digits"]).data(data)
    assert clean == {"n": 12345679, "f": 1.5, "ok": True, "secret": REDACTED, "inside": REDACTED, "float": REDACTED}
    assert n == 3
    assert Scrubber(["not-digits"]).data({"n": 12345678}) == ({"n": 12345678}, 0)


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(min_size=8, max_size=40).filter(lambda s: s.strip() == s and "\0" not in s),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
    form=st.sampled_from(list(_forms("x"))),
)
def test_property_no_form_of_the_secret_survives(secret, before, after, form):
    encoded = _forms(secret)[form]
    text, n = Scrubber([secret]).text(before + encoded + after)
    assert n >= 1
    assert encoded not in text


@pytest.mark.parametrize("before, secret_text", [
    ("", SECRET), ("", base64.b64encode(SECRET.encode()).decode()), ("", quote(SECRET, safe="")),
    ("Authorization: Bearer ", "t" * 40),  # a secret shape: the pattern, not the value, finds it
])
def test_a_cut_never_splits_a_secret_or_a_secret_shape(before, secret_text):
    scrubber = Scrubber([SECRET])
    head = "x" * 50 + before
    text = head + secret_text + " tail"
    for limit in range(len(head) + 1, len(head) + len(secret_text)):
        assert scrubber.cut(text, limit) == head
    assert scrubber.cut(text, len(head) + len(secret_text)) == head + secret_text
    assert scrubber.cut(text, 20) == "x" * 20 and scrubber.cut("short", 100) == "short"


@pytest.mark.parametrize("token", [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a1B2" * 9,
    "xoxb-1234567890-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
])
@pytest.mark.parametrize("before, after", [("é", "é"), ("日本", "語"), ("", "ß"), ("Ω", "")])
def test_a_token_next_to_a_non_ascii_letter_is_still_redacted(token, before, after):
    """The tokens are ASCII; with Unicode \\b a token touching "é" had no word boundary and was kept."""
    text, n = Scrubber().text(f"{before}{token}{after}")
    assert token not in text and n == 1
    assert text.startswith(before) and text.endswith(after)


@pytest.mark.parametrize("wrap", [
    lambda b: {"blob": b},  # bytes beside plain values
    lambda b: {"blob": b, "tags": {"a"}},  # and something with no JSON form (a set)
    lambda b: [bytearray(b)],
    lambda b: {b"k": b},  # a key with no JSON form: the whole used to fall back to repr()
    lambda b: {("t", 1): b},  # a tuple key
    lambda b: {b: "value"},  # the secret as a key
    lambda b: {"set": {b}},  # in a set
    lambda b: {"pair": (b, b"x")},  # in a tuple
    lambda b: {"deep": nested({"k": b}, 70)},  # past MAX_DEPTH: all of it as JSON text
])
def test_a_secret_a_python_tool_returns_as_bytes_is_removed(wrap):
    """Bytes are read as the text they hold before the scrubber sees them, not written as
    Python's ``b'p\\xc3\\xa4...'``, in which a non-ASCII secret no longer looks like itself."""
    from gateway.executors.base import ExecResult
    from gateway.normalize import scrub_result

    secret = "pässwörd-Ünïcode-42"
    clean = scrub_result(ExecResult(ok=True, data=wrap(secret.encode())), {secret})
    shown = json.dumps(clean.data, ensure_ascii=False)
    assert secret not in shown and "\\\\xc3" not in shown and clean.redactions >= 1, shown


def test_data_with_no_json_form_keeps_what_it_says():
    from gateway.executors.base import ExecResult
    from gateway.normalize import scrub_result

    clean = scrub_result(ExecResult(ok=True, data={1: {"a", }, None: (1, 2), b"k": b"\xff", ("a", 2): 3.5}), ())
    assert clean.data == {"1": ["a"], "null": [1, 2], "k": "ff", '["a", 2]': 3.5}
    deep = scrub_result(ExecResult(ok=True, data=nested({b"k": b"v"}, 70)), ()).data
    assert deep == "<list nested deeper than 64>"  # past MAX_DEPTH, with a bytes key JSON cannot write: named


def test_a_secret_in_an_objects_text_is_removed_in_its_bytes_escape_form():
    """What str() of a tool's object says may quote bytes as Python writes them: that form is searched too."""
    from gateway.executors.base import ExecResult
    from gateway.normalize import scrub_result

    secret = "pässwörd-Ünïcode-42"

    class Holder:
        def __str__(self) -> str:
            return f"Holder(token={secret.encode()!r})"

    clean = scrub_result(ExecResult(ok=True, data={"h": Holder()}), {secret})
    assert "\\xc3" not in json.dumps(clean.data) and clean.redactions == 1, clean.data
