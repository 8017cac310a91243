"""Remove secrets from tool output before it is normalized.

Two layers, both counted in ``redactions``:

1. **Exact values** — every value injected for this call (``ResolvedCredentials.secret_values``)
   in the forms a tool is likely to echo it: raw, standard and URL-safe base64 (with and without
   padding, and the stable core of its encoding at each of the three byte alignments, so it is
   also found inside a larger base64 blob), percent-encoding (as Python, PHP, Java and JavaScript
   write it, hex in either case), hex (both cases) and JSON-escaped (as Python and JavaScript, PHP,
   Go, Gson and .NET escape it); and written as UTF-16 (``_utf16_forms``: either byte order, at any
   byte offset), as output read as UTF-8 shows it (a NUL between an ASCII secret's characters), as
   hex, as Python's bytes escapes and JSON-escaped. Not found: a secret with its letters' case
   changed, inside base64 wrapped over lines (its line breaks fall anywhere in the secret's
   encoding), or in UTF-32 or UTF-16 base64.
2. **Patterns** — common secret shapes whatever their origin (PEM private keys, bearer tokens,
   AWS keys, GitHub / Slack tokens, JWTs). Configurable; ``DEFAULT_PATTERNS`` is the default.
   Each of those runs in linear time on any text, as ``cut`` does: the text is the tool's, and
   ``re`` has no step limit and holds the GIL (tests/executors/test_output_patterns_linear.py).

JSON structures are walked: strings in keys and values are scrubbed. A number whose decimal form
contains an all-digit secret (a PIN, a numeric API key) is replaced by ``[REDACTED]``; other
numbers and booleans are left alone. A key the scrubber changed that then equals another key gets
the first free ``#n`` suffix (``distinct_keys``), so nothing is silently dropped; a key it left
alone keeps its name.

Output that must be cut to a size (an executor's cap) is cut with ``Scrubber.cut`` *before*
scrubbing, at a point that splits no secret: the scrubber only recognises whole secrets, so a
plain cut could let all but the last character of one through. The text given to ``cut`` must
reach ``Scrubber.margin`` bytes past the cut, so that a secret starting before it is seen whole.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"

MIN_CORE_CHARS = 8
"""Alignment-shifted base64 cores shorter than this are not searched (too many false hits)."""

PATTERN_MARGIN_BYTES = 4096
"""Output read past a cap so that a pattern-shaped secret (a token, a JWT) crossing it is seen whole."""


@dataclass(frozen=True, slots=True)
class SecretPattern:
    name: str
    regex: re.Pattern[str]


_Spans = tuple[list[int], list[int]]  # the starts and the ends of a pattern's matches, in order


def _p(name: str, pattern: str, flags: int = 0) -> SecretPattern:
    return SecretPattern(name, re.compile(pattern, flags))


# \b is ASCII (re.A) where a pattern has it: the tokens are ASCII, and with Unicode \b a token
# written next to a non-ASCII letter ("…R8Ué", "éAKIA…") had no boundary there and was kept.
DEFAULT_PATTERNS: tuple[SecretPattern, ...] = (
    _p("pem_private_key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
    _p("aws_access_key_id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b", re.A),
    _p("aws_secret_access_key", r"(?i)(?<=aws_secret_access_key)(\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{40}"),
    _p("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b", re.A),
    _p("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b", re.A),
    # from the head of a run of token characters, keeping (group 1) what precedes the first eyJ: a match
    # tried from each eyJ in the run (\beyJ after a -) rescans the run each time, quadratic on eyJ-eyJ-...
    _p("jwt", r"(?<![A-Za-z0-9_-])((?>[A-Za-z0-9_-]*?(?=\beyJ)))"
              r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b", re.A),
    _p("bearer_token", r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{12,}"),
    _p("basic_auth", r"(?i)(?<=basic )[A-Za-z0-9+/]{12,}={0,2}"),
    _p("url_password", r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
)


def encoded_forms(value: str) -> set[str]:
    """The strings to search for when ``value`` might have been echoed, longest first is not implied."""
    if not value:
        return set()
    raw = value.encode("utf-8")
    forms = {value, raw.hex(), raw.hex().upper()} | _percent_forms(value) | _json_forms(value)
    forms.add(repr(raw)[2:-1])  # Python's b'...' escapes, as an object's str() may quote bytes
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        full = enc(raw).decode("ascii")
        forms.update({full, full.rstrip("=")})
        forms.update(_shifted_cores(raw, enc))
    forms.update(_utf16_forms(value))
    return {f for f in forms if f}


def _utf16_forms(value: str) -> set[str]:
    """``value`` written as UTF-16 in either byte order, as the gateway comes to show it: read as
    UTF-8 as the executors read output (an ASCII secret with a NUL after each character, little-endian,
    or before it, big-endian; other characters as the bytes decode, U+FFFD for those that do not),
    as hex (a ``python`` tool's bytes that are not UTF-8: ``bytes_to_text``), as Python's bytes
    escapes (the ``repr`` of such bytes, should a tool put that in its own text), and JSON-escaped (``\\u0000``, as every encoder here writes a NUL).

    Each without the NUL bytes at its ends: of an ASCII secret the two byte orders then give the
    same forms, found wherever the UTF-16 text starts, at an even or an odd byte offset (UTF-8 reads
    ASCII and NUL a byte at a time, and no byte before them can take them into a character)."""
    forms: set[str] = set()
    for core in {value.encode(codec, "surrogatepass").strip(b"\0") for codec in ("utf-16-le", "utf-16-be")}:
        text = core.decode("utf-8", "replace")
        forms |= {text, core.hex(), core.hex().upper(), repr(core)[2:-1]} | _json_forms(text)
    return forms


def _percent_forms(value: str) -> set[str]:
    """``value`` percent-encoded as common libraries write it, each also with lower-case hex."""
    forms = {
        quote(value, safe=""),  # RFC 3986: Python's quote, PHP's rawurlencode, Go's PathEscape
        quote(value), quote_plus(value),  # a path; a form field (space as +)
        quote_plus(value, safe="").replace("~", "%7E"),  # PHP's urlencode
        quote_plus(value, safe="*").replace("~", "%7E"),  # Java's URLEncoder
        quote(value, safe="!*'()"),  # JavaScript's encodeURIComponent
    }
    return forms | {_PERCENT_HEX.sub(lambda m: m.group().lower(), f) for f in forms}


_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")


def _json_forms(value: str) -> set[str]:
    """``value`` inside a JSON string as common encoders write it: escaped as Python and JavaScript
    do (and with non-ASCII as ``\\u`` escapes), ``/`` as ``\\/`` (PHP), HTML-sensitive characters as
    ``\\u`` escapes (Go: ``<>&``; Gson: ``<>&='``, both also U+2028/9; .NET: ``_dotnet``)."""
    plain = json.dumps(value, ensure_ascii=False)[1:-1]
    ascii_only = json.dumps(value)[1:-1]
    return {
        plain, ascii_only, ascii_only.replace("/", "\\/"),
        _escaped(plain, "<>&\u2028\u2029"), _escaped(plain, "<>&='\u2028\u2029"), _dotnet(value),
    }


_DOTNET_SHORT = {"\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _dotnet(value: str) -> str:
    """``value`` as .NET's System.Text.Json writes it in a string: ``\\`` and the short control
    escapes, every other control character, non-ASCII character (UTF-16 units) and ``<>&'"+` ``
    as ``\\uXXXX`` with upper-case hex."""
    if value.isascii():
        return value.translate(_DOTNET_ASCII)
    out = []
    for char in value:
        if char in _DOTNET_SHORT:
            out.append(_DOTNET_SHORT[char])
        elif char < " " or char > "\x7f" or char in "<>&'\"+`":
            units = char.encode("utf-16-be", "surrogatepass")
            out.extend("\\u%02X%02X" % (units[i], units[i + 1]) for i in range(0, len(units), 2))
        else:
            out.append(char)
    return "".join(out)


_DOTNET_ASCII = {c: _DOTNET_SHORT.get(chr(c), "\\u%04X" % c) for c in range(128)
                 if chr(c) in _DOTNET_SHORT or c < 0x20 or chr(c) in "<>&'\"+`"}
"""``_dotnet``'s escapes of ASCII characters, for ``str.translate`` (a NUL between each character
of a secret's UTF-16 form made the loop the slowest part of a call's scrubber)."""


def _escaped(text: str, chars: str) -> str:
    """``text`` with each of ``chars`` written as a ``\\u`` escape (lower-case hex)."""
    for char in chars:
        text = text.replace(char, "\\u%04x" % ord(char))
    return text


def _shifted_cores(raw: bytes, enc: Any) -> set[str]:
    """Base64 characters determined by ``raw`` alone when it starts at byte offset 0, 1 or 2."""
    cores = set()
    for shift in range(3):
        text = enc(b"\0" * shift + raw).decode("ascii").rstrip("=")
        start = -(-8 * shift // 6)
        end = (8 * (shift + len(raw))) // 6
        core = text[start:end]
        if len(core) >= MIN_CORE_CHARS:
            cores.add(core)
    return cores


class Scrubber:
    """Scrubs one call's output. Build one per call with that call's secret values."""

    def __init__(self, secrets: Iterable[str] = (), patterns: Sequence[SecretPattern] = DEFAULT_PATTERNS) -> None:
        secrets = tuple(secrets)
        self._forms, self._margin, self._exact = _exact_forms(tuple(sorted(set(secrets))))
        self._patterns = tuple(patterns)
        self._digit_secrets = tuple(s for s in secrets if s.isascii() and s.isdigit())

    def margin(self) -> int:
        """Bytes to read past a cap so that any form of this call's secrets (or a pattern-shaped
        secret) starting before the cap lies whole in what was read: how far past a cut the text
        given to ``cut`` must reach."""
        return self._margin

    def cut(self, text: str, limit: int) -> str:
        """At most the first ``limit`` characters of ``text``, cut earlier where the cut would
        split a secret (any injected form, or a pattern match), so no part of it is kept."""
        cut = min(limit, len(text))
        if cut == len(text):
            return text
        # each pattern runs once: the cut only moves back, so the matches starting before it are all it
        # can meet. Moves can chain (a "Bearer <token>" secret and bearer_token's matches overlapping in
        # turn, each a few characters back), and running the patterns again for each move is quadratic.
        spans = [_spans_before(pattern.regex, text, cut) for pattern in self._patterns]
        while (moved := self._straddling(text, cut, spans)) is not None:
            cut = moved
        return text[:cut]

    def _straddling(self, text: str, cut: int, spans: list[_Spans]) -> int | None:
        """The start of a secret that begins before ``cut`` and ends after it, if any."""
        for form in self._forms:
            window = max(0, cut - len(form) + 1)
            found = text.find(form, window, cut + len(form) - 1)
            if found != -1 and found < cut:
                return found
        for pattern, (starts, ends) in zip(self._patterns, spans):
            last = bisect_left(starts, cut) - 1  # matches do not overlap: only the last one before can cross
            if last >= 0 and (ends[last] > cut or ends[last] == cut and not _whole_before(pattern.regex, text,
                                                                                           starts[last], cut)):
                return starts[last]
        return None

    def text(self, value: str) -> tuple[str, int]:
        """``value`` with secrets replaced by ``[REDACTED]``, and the number of replacements."""
        if not value:
            return value, 0
        count = 0
        if self._exact is not None:
            value, n = self._exact.subn(REDACTED, value)
            count += n
        for pattern in self._patterns:
            value, n = pattern.regex.subn(_keep_prefix, value)
            count += n
        return value, count

    def data(self, value: Any) -> tuple[Any, int]:
        """A copy of JSON data with every string (keys and values) scrubbed, and the number of replacements.

        ``value`` must be JSON data as ``gateway.jsonable`` makes of a tool's result (its only
        caller): dicts with ``str`` keys, lists, ``str``, ``int``, ``float``, ``bool``, ``None``.
        Anything else (a tuple, bytes, a key that is not text) raises ``TypeError``: passed through
        unread, it could carry a secret out."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return self._mapping(value)
        if isinstance(value, list):
            out, total = [], 0
            for item in value:
                clean, n = self.data(item)
                out.append(clean)
                total += n
            return out, total
        if value is None or isinstance(value, bool):
            return value, 0
        if not isinstance(value, (int, float)):
            raise TypeError(f"Scrubber.data takes JSON data, not {type(value).__name__}")
        if self._digit_secrets:
            try:
                digits = str(value)
            except ValueError:  # an int too long to write in decimal: it cannot be checked
                return REDACTED, 1
            if any(secret in digits for secret in self._digit_secrets):
                return REDACTED, 1
        return value, 0

    def _mapping(self, value: dict[str, Any]) -> tuple[dict[str, Any], int]:
        items = list(value.items())
        keys, changed, total = [], [], 0
        for key, _ in items:
            if not isinstance(key, str):
                raise TypeError(f"Scrubber.data takes text keys, not {type(key).__name__}")
            clean, n = self.text(key)
            keys.append(clean)
            changed.append(clean != key)
            total += n
        if total:  # a key was scrubbed: it may now equal another; a suffix must spell no secret
            keys = distinct_keys(keys, changed, acceptable=lambda key: self.text(key)[1] == 0)
        out: dict[str, Any] = {}
        for key, (_, item) in zip(keys, items):
            out[key], n = self.data(item)
            total += n
        return out, total


@lru_cache(maxsize=64)
def _exact_forms(secrets: tuple[str, ...]) -> tuple[tuple[str, ...], int, re.Pattern[str] | None]:
    """The forms of ``secrets`` searched for, longest first; the margin they need (``Scrubber.margin``);
    and their alternation. Kept for the latest sets, as ``re`` keeps the latest compiled patterns
    (this one among them, which holds every form): a subprocess call builds three scrubbers (one
    per captured stream and its normalization's), and making the forms and the pattern took ~0.2 ms
    for each once the UTF-16 forms were added."""
    forms: set[str] = set()
    for secret in secrets:
        forms |= encoded_forms(secret)
    longest_first = tuple(sorted(forms, key=len, reverse=True))
    margin = max([PATTERN_MARGIN_BYTES, *(len(f.encode()) for f in longest_first)])
    exact = re.compile("|".join(re.escape(f) for f in longest_first)) if longest_first else None
    return longest_first, margin, exact


def _whole_before(regex: re.Pattern[str], text: str, start: int, cut: int) -> bool:
    """Whether the match from ``start`` to ``cut`` is still one with the text ending at the cut: a
    pattern may need what follows it (url_password the "@"), which the cut takes away, and the
    secret would be left unrecognised in the kept part."""
    match = regex.match(text, start, cut)
    return match is not None and match.end() == cut


def _spans_before(regex: re.Pattern[str], text: str, cut: int) -> _Spans:
    """Where ``regex``'s matches in ``text`` (as ``finditer`` finds them) that start before ``cut`` lie."""
    starts: list[int] = []
    ends: list[int] = []
    for match in regex.finditer(text):
        if match.start() >= cut:
            break
        starts.append(match.start())
        ends.append(match.end())
    return starts, ends


def _keep_prefix(match: re.Match[str]) -> str:
    groups = [g for g in match.groups() if g is not None] if match.re.groups else []
    return (groups[0] if groups else "") + REDACTED


def distinct_keys(keys: Sequence[str], renamed: Sequence[bool],
                  acceptable: Callable[[str], bool] = lambda _: True) -> list[str]:
    """``keys`` (a mapping's, in order) made distinct, so that no value is lost when they become its keys.

    A key not ``renamed`` (as the tool wrote it) stays as it is: those must be distinct already. A
    renamed one (converted to text, or scrubbed) that equals any unrenamed key or an earlier key gets
    the first free ``#n`` suffix, n = 2, 3, ...: ``{1: a, "1": b}`` gives ``{"1#2": a, "1": b}``, and
    with a ``"1#2"`` of the tool's own as well, ``"1#3"``. A suffixed key must be ``acceptable``
    too (the scrubber's: it spells no secret, as ``x#2`` completes a secret ``…x#2``); finitely many
    keys are not, so some n is. Linear time however many collide: for each key the next n to try
    is remembered, so no suffix is tried twice."""
    taken = {key for key, r in zip(keys, renamed) if not r}
    next_n: dict[str, int] = {}
    out = []
    for key, r in zip(keys, renamed):
        if r:
            if key in taken:
                n = next_n.get(key, 2)
                while f"{key}#{n}" in taken or not acceptable(f"{key}#{n}"):
                    n += 1
                next_n[key] = n + 1
                key = f"{key}#{n}"
            taken.add(key)
        out.append(key)
    return out


def bytes_to_text(raw: bytes) -> str:
    """The text ``raw`` holds (UTF-8), else its hex: never Python's ``b'...'``, in which a
    non-ASCII secret is written as escapes no pattern of it matches."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return binascii.hexlify(raw).decode("ascii")
