"""The ``iri``, ``iri-reference`` and ``uri-template`` formats, checked in linear time.

A format checker runs on every argument string of a call, so its cost is the agent's to choose.
jsonschema checks ``iri`` and ``iri-reference`` with ``rfc3987_syntax``, an Earley parser that
is super-linear (a 6,400-character IRI took seconds, holding the event loop and the GIL) and
builds some forty parsers when imported (over a second of every process start); it also
refuses valid IPv6 hosts such as ``http://[::1]/`` and characters beyond U+FFFF. It checks
``uri-template`` with ``uri_template``, which is super-linear on runs of ``{`` (seconds for
64 KB). Here each format is one regular expression built from its RFC's ABNF, with possessive
repetition only (Python 3.11's ``*+``), so no match backtracks into a repetition: the time is
linear in the string's length.

- ``iri`` is RFC 3987's ``IRI`` and ``iri-reference`` its ``IRI-reference``. On ASCII text
  they are exactly RFC 3986's ``URI`` and ``URI-reference``.
- ``uri-template`` is RFC 6570's ``URI-Template`` (level 4).
"""

from __future__ import annotations

import re

# -- RFC 3987 ------------------------------------------------------------------------------

_UCSCHAR = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    "\U00010000-\U0001fffd\U00020000-\U0002fffd\U00030000-\U0003fffd\U00040000-\U0004fffd"
    "\U00050000-\U0005fffd\U00060000-\U0006fffd\U00070000-\U0007fffd\U00080000-\U0008fffd"
    "\U00090000-\U0009fffd\U000a0000-\U000afffd\U000b0000-\U000bfffd\U000c0000-\U000cfffd"
    "\U000d0000-\U000dfffd\U000e1000-\U000efffd"
)
_IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"
_UNRESERVED = r"A-Za-z0-9._~\-"
_SUB_DELIMS = "!$&'()*+,;="
_PCT = "%[0-9A-Fa-f]{2}"


def _run(chars: str, *, plus: bool = False) -> str:
    """Possessive repetition of one of ``chars`` or a percent-encoded octet."""
    return f"(?:[{chars}]|{_PCT}){'++' if plus else '*+'}"


_IUNRESERVED = _UNRESERVED + _UCSCHAR
_IPCHAR = _IUNRESERVED + _SUB_DELIMS + ":@"

_H16 = "[0-9A-Fa-f]{1,4}"
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    """RFC 3986's nine forms of ``IPv6address``; every repetition is bounded."""
    def h(n: int) -> str:  # n times "h16:"
        return f"(?:{_H16}:){{{n}}}" if n else ""

    def upto(n: int) -> str:  # [ *n( h16 ":" ) h16 ]
        return f"(?:(?:{_H16}:){{0,{n}}}{_H16})?"

    forms = [f"{h(6)}{_LS32}", f"::{h(5)}{_LS32}", f"{upto(0)}::{h(4)}{_LS32}", f"{upto(1)}::{h(3)}{_LS32}",
             f"{upto(2)}::{h(2)}{_LS32}", f"{upto(3)}::{_H16}:{_LS32}", f"{upto(4)}::{_LS32}",
             f"{upto(5)}::{_H16}", f"{upto(6)}::"]
    return "(?:" + "|".join(forms) + ")"  # at most 39 characters: bounded work, any backtracking included


_IP_LITERAL = rf"\[(?:{_ipv6()}|[vV][0-9A-Fa-f]++\.[{_UNRESERVED}{_SUB_DELIMS}:]++)\]"
_IAUTHORITY = (
    rf"(?:{_run(_IUNRESERVED + _SUB_DELIMS + ':')}@)?"  # iuserinfo "@": no "@" in either part
    rf"(?:{_IP_LITERAL}|{_run(_IUNRESERVED + _SUB_DELIMS)})"  # IPv4address is also an ireg-name
    r"(?::[0-9]*+)?"
)
_ISEGMENT = _run(_IPCHAR)
_ISEGMENT_NZ = _run(_IPCHAR, plus=True)
_ISEGMENT_NZ_NC = _run(_IUNRESERVED + _SUB_DELIMS + "@", plus=True)
_TAIL = f"(?:/{_ISEGMENT})*+"
_QUERY_FRAGMENT = rf"(?:\?{_run(_IPCHAR + _IPRIVATE + '/?')})?(?:#{_run(_IPCHAR + '/?')})?"
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*+"

_IRI = re.compile(
    rf"{_SCHEME}:(?://{_IAUTHORITY}{_TAIL}|/(?:{_ISEGMENT_NZ}{_TAIL})?|{_ISEGMENT_NZ}{_TAIL}|){_QUERY_FRAGMENT}"
)
_IRELATIVE_REF = re.compile(
    rf"(?://{_IAUTHORITY}{_TAIL}|/(?:{_ISEGMENT_NZ}{_TAIL})?|{_ISEGMENT_NZ_NC}{_TAIL}|){_QUERY_FRAGMENT}"
)


def is_iri(value: str) -> bool:
    """RFC 3987 ``IRI``: a scheme, then the hierarchical part, query and fragment."""
    return _IRI.fullmatch(value) is not None


def is_iri_reference(value: str) -> bool:
    """RFC 3987 ``IRI-reference``: an ``IRI`` or a relative reference."""
    return _IRI.fullmatch(value) is not None or _IRELATIVE_REF.fullmatch(value) is not None


# -- RFC 6570 ------------------------------------------------------------------------------

_LITERALS = r"!#$&(-;=?-\[\]_a-z~" + _UCSCHAR + _IPRIVATE  # %x21 / %x23-24 / %x26 / %x28-3B / %x3D / %x3F-5B / %x5D / %x5F / %x61-7A / %x7E
_VARCHAR = f"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?+{_VARCHAR})*+(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION = rf"\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*+\}}"
_URI_TEMPLATE = re.compile(rf"(?:[{_LITERALS}]++|{_PCT}|{_EXPRESSION})*+")


def is_uri_template(value: str) -> bool:
    """RFC 6570 ``URI-Template``: literals (or percent-encoded octets) and ``{…}`` expressions."""
    return _URI_TEMPLATE.fullmatch(value) is not None


CHECKERS = {"iri": is_iri, "iri-reference": is_iri_reference, "uri-template": is_uri_template}
"""Format name → a checker of a string (other instance types pass a format, as JSON Schema says)."""
