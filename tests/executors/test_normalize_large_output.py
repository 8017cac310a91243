"""A result far larger than an observation can show is read only as far as it can show, and a margin.

16 MiB of output was converted, scrubbed and scanned whole — about 2.5 s of the event loop, during
which no other call moved — for all but 64 KiB of it to be dropped. Now the data is copied only as
far as the cap and the scrubber's margin reach (``jsonable.Keep``): what the observation shows is
what scrubbing everything and then capping showed (unless redactions shrank the part read by more
than the margin: it then shows less, never more), a secret across the point where the kept part
ends is cut out whole, and the observation says ``truncated``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.executors.base import ErrorInfo, ExecResult
from gateway.normalize import ERROR_MESSAGE_CHARS, _cap, normalize, scrub_result
from gateway.scrub import PATTERN_MARGIN_BYTES, REDACTED, Scrubber
from tests.conftest import NormalizeContext
from tests.executors._helpers import SECRET

CAP = 512


class _Credentials:
    secret_values = (SECRET,)


class _Context(NormalizeContext):
    credentials = _Credentials()


def _observe(data, cap=CAP, **result):
    return normalize(_Context(), ExecResult(ok=True, data=data, **result), 1, cap)


def _scrubbed_all_then_capped(data, cap=CAP):
    """What the observation showed before: every string scrubbed, then the JSON capped."""
    return _cap(scrub_result(ExecResult(ok=True, data=data), {SECRET}).data, cap)


_text = st.one_of(st.text(max_size=40), st.just(SECRET), st.text(alphabet="ab \n", min_size=200, max_size=3000))
_values = st.recursive(
    st.one_of(_text, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(), st.binary(max_size=50)),
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(_text, inner, max_size=6),
                            st.tuples(inner, inner)),
    max_leaves=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.lists(_values, min_size=1, max_size=12))
def test_what_is_shown_is_what_scrubbing_everything_then_capping_showed(data):
    shown = _observe(data)
    before, truncated = _scrubbed_all_then_capped(data)
    assert shown.data == before
    assert shown.truncated or not truncated
    assert SECRET[:12] not in str(shown.data)


class _Counting(Scrubber):
    read = 0

    def text(self, value):
        _Counting.read += len(value)
        return super().text(value)


@pytest.mark.parametrize("data", [
    "x" * (16 << 20),
    {"exit_code": 0, "stdout": "y" * (16 << 20)},
    [{"id": i, "name": "n" * 100, "tags": ["a", "b"]} for i in range(150_000)],
    [b"z" * 1000] * 20_000,  # not plain: copied, as far as it is kept
    {"rows": [(i, str(i)) for i in range(500_000)]},
], ids=["text", "text_in_mapping", "rows", "bytes", "tuples"])
def test_only_what_can_be_shown_is_read(monkeypatch, data):
    monkeypatch.setattr("gateway.normalize.Scrubber", _Counting)
    _Counting.read = 0
    shown = _observe(data, cap=64 * 1024)
    assert shown.truncated
    assert _Counting.read <= 64 * 1024 + 2 * PATTERN_MARGIN_BYTES, _Counting.read


def test_a_long_error_message_is_read_only_as_far_as_it_is_shown(monkeypatch):
    monkeypatch.setattr("gateway.normalize.Scrubber", _Counting)
    _Counting.read = 0
    message = "boom " * (1 << 20) + SECRET
    shown = normalize(_Context(), ExecResult.failure("tool_error", message), 1, CAP)
    assert shown.error.message.startswith("boom boom") and SECRET not in shown.error.message
    assert _Counting.read <= ERROR_MESSAGE_CHARS + 2 * PATTERN_MARGIN_BYTES


def test_a_secret_across_the_end_of_the_kept_part_is_left_out_whole():
    """With many secrets redacted before it (each 44 characters become 10), the scrubbed text is
    shorter than the cap and the kept part's end is shown: the secret there is not cut in half."""
    cap = 8192
    room = cap + Scrubber([SECRET]).margin()
    many = SECRET * 250  # 11,000 characters scrubbed to 2,500: more than the margin shrinks away
    text = many + "x" * (room - len(many) - 20) + SECRET + "tail" * 100
    shown = _observe(text, cap=cap)
    assert shown.truncated and shown.redactions == 250
    assert isinstance(shown.data, str) and shown.data.startswith(REDACTED * 3)
    assert shown.data.endswith("x") and SECRET[:4] not in shown.data.replace(REDACTED, "")


def test_a_private_key_across_the_end_of_the_kept_part_is_not_shown():
    key = "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 400 + "\n-----END PRIVATE KEY-----"
    data = {"log": "start " * 60 + key + " after" * 5000}
    shown = _observe(data)
    assert shown.truncated
    assert "MIIEvQ" not in str(shown.data) and "BEGIN PRIVATE" not in str(shown.data)


def test_what_fits_is_kept_whole_and_not_marked_truncated():
    data = {"rows": [{"n": i, "s": "v" * 20} for i in range(10)], "secret": SECRET}
    shown = _observe(data, cap=64 * 1024)
    assert not shown.truncated and shown.redactions == 1
    assert shown.data["rows"] == data["rows"] and shown.data["secret"] == REDACTED


def test_a_url_password_whose_at_sign_falls_at_the_cut_is_not_shown():
    """``url_password`` matches only before an "@", which is not part of the match: a cut just
    before the "@" left ``://user:password`` unrecognised in the kept part."""
    url = "postgres://admin:hunter2-Sup3rS3cret@db.internal/app"
    message = "x" * (ERROR_MESSAGE_CHARS - url.index("@")) + url + " failed"
    assert message.index("@") == ERROR_MESSAGE_CHARS
    shown = normalize(_Context(), ExecResult.failure("tool_error", message), 1, CAP)
    assert "hunter2" not in shown.error.message and "Sup3r" not in shown.error.message
    assert "hunter2" not in Scrubber([]).cut(message, ERROR_MESSAGE_CHARS)


class _Walked(Scrubber):
    walked = 0

    def data(self, value):
        _Walked.walked += 1
        return super().data(value)


@pytest.mark.parametrize("data", [[{}] * 2_000_000, [()] * 2_000_000, [[]] * 2_000_000],
                         ids=["mappings", "tuples", "lists"])
def test_empty_containers_count_towards_what_is_read(monkeypatch, data):
    monkeypatch.setattr("gateway.normalize.Scrubber", _Walked)
    _Walked.walked = 0
    shown = _observe(data, cap=64 * 1024)
    assert shown.truncated and _Walked.walked <= 64 * 1024, _Walked.walked


def test_long_numbers_count_for_their_digits():
    """Each number counted as one character: 69,000 ints of 2,000 bits passed a 64 KiB cap whole, and
    41 MB of JSON were dumped and capped on the event loop. Now the copy stops near the cap."""
    from gateway.jsonable import Keep, jsonable

    big = [2**1999 + i for i in range(69_000)]
    kept = jsonable(big, Keep(64 * 1024 + PATTERN_MARGIN_BYTES, Scrubber([SECRET])))
    assert len(kept) * 600 < 4 * 64 * 1024  # about 110 of 69,000 read (602 digits each)
    shown = _observe(big, cap=64 * 1024)
    assert shown.truncated and shown.data == _scrubbed_all_then_capped(big[:1000], cap=64 * 1024)[0]
