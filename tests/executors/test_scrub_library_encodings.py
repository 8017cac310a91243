"""A secret as common libraries write it inside JSON or a URL is found and redacted: PHP's
json_encode (``\\/``), Go's encoding/json (``\\u0026`` for ``&``, ``<``, ``>``), Gson (also ``=``
and ``'``), .NET's System.Text.Json (``+`` and non-ASCII too, upper-case hex), PHP's urlencode and
Java's URLEncoder (``~`` as ``%7E``), JavaScript's encodeURIComponent (``'`` kept), and
percent-encoding in lower-case hex. Each expected text is written out here by hand, not made with
the code under test. An HTTP body cut at its cap is not parsed as JSON, so such escapes reach the
scrubber as they were written."""

from __future__ import annotations

import pytest

from gateway.scrub import REDACTED, Scrubber

SECRET = "Sup3r/S+cr&t<~>'=é"

WRITTEN = {
    "php json_encode": r"Sup3r\/S+cr&t<~>'=\u00e9",
    "go encoding/json": r"Sup3r/S+cr\u0026t\u003c~\u003e'=é",
    "gson": r"Sup3r/S+cr\u0026t\u003c~\u003e\u0027\u003dé",
    ".net System.Text.Json": r"Sup3r/S\u002Bcr\u0026t\u003C~\u003E\u0027=\u00E9",
    "php urlencode": "Sup3r%2FS%2Bcr%26t%3C%7E%3E%27%3D%C3%A9",
    "java URLEncoder": "Sup3r%2FS%2Bcr%26t%3C%7E%3E%27%3D%C3%A9",
    "js encodeURIComponent": "Sup3r%2FS%2Bcr%26t%3C~%3E'%3D%C3%A9",
    "lower-case hex": "Sup3r%2fS%2bcr%26t%3c~%3e%27%3d%c3%a9",
}


@pytest.mark.parametrize("style", sorted(WRITTEN))
def test_a_secret_as_a_library_writes_it_is_redacted(style):
    text = f'{{"token": "{WRITTEN[style]}", "note": "kept"}}'
    clean, count = Scrubber([SECRET]).text(text)
    assert count == 1 and clean == f'{{"token": "{REDACTED}", "note": "kept"}}', clean


@pytest.mark.parametrize("written", [
    r"a\\\"b\u003dc",  # Gson: the backslash doubled, the quote escaped, = as \u003d
    r"a\\\u0022b=c",  # .NET: the backslash doubled, the quote as \u0022, = kept
], ids=["gson", "dotnet"])
def test_a_secret_with_a_backslash_and_a_quote_is_redacted(written):
    clean, count = Scrubber(['a\\"b=c']).text(f"token={written};")
    assert (clean, count) == (f"token={REDACTED};", 1), clean


def test_a_secret_holding_a_literal_backslash_u_in_the_dotnet_form():
    """.NET writes a literal ``\\u00ff`` in a secret as ``\\\\u00ff`` (the backslash escaped, the
    hex as it was): the form is built per character, not by upper-casing every escape-like text."""
    clean, count = Scrubber(["K\\u00ff+9"]).text(r"token=K\\u00ff\u002B9;")
    assert (clean, count) == (f"token={REDACTED};", 1), clean
