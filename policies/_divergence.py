"""Builtin calls whose answers differ between the embedded engine (regorus) and OPA.

A bundle that passes ``opa test`` can decide differently embedded, without an error: regorus's
regular expressions follow Unicode where OPA's (Go's RE2) are ASCII (``\\w`` matches ``ï`` and
``\\d`` Arabic-Indic digits), its case mapping is full Unicode (``upper("ﬀ")`` is ``FF``), its
``net.cidr_*`` does not put an IPv4-mapped IPv6 address (``::ffff:10.1.2.3``) in an IPv4 range,
its ``to_number`` takes surrounding spaces, and two builtins panic on some strings (the call is
then denied). Each was measured against the pinned OPA. ``divergences`` names the call sites
in a bundle's AST, for ``toolgate policy check``, ``toolgate config check`` and the gateway's
start log; the bundle still loads (the answers differ only for some inputs), and
``toolgate policy test --engine opa`` or ``policy.engine: opa`` is the remedy.
"""

from __future__ import annotations

import re
from typing import Any

from policies._ast import builtin_calls

_REGEX = ("regular expressions are Unicode-aware in regorus and ASCII in OPA: \\w \\d \\s \\b and "
          "case-insensitive matching also match non-ASCII letters, digits and spaces")
_PATTERN_PARAM = {"regex.match": 0, "regex.find_n": 0, "regex.find_all_string_submatch_n": 0, "regex.split": 0,
                  "regex.replace": 1, "regex.template_match": 0}
"""Where each regex builtin takes its pattern."""
_UNICODE_CONSTRUCT = re.compile(r"\\[wWdDsSbB]|\(\?[a-zA-Z]*i")

_CIDR = ("an IPv4-mapped IPv6 address (::ffff:10.1.2.3) is not in an IPv4 range in regorus, where OPA says it "
         "is (or regorus fails and the call is denied)")
_CASE = "regorus maps case by full Unicode rules (upper(\"ﬀ\") is \"FF\", lower(\"İ\") keeps a dot), OPA by simple ones"
_CALLS = {
    "upper": _CASE,
    "lower": _CASE,
    "net.cidr_contains": _CIDR,
    "net.cidr_intersects": _CIDR,
    "net.cidr_contains_matches": _CIDR,
    "to_number": "regorus reads a number with spaces around it (\" 1000\"), where OPA leaves it undefined",
    "strings.count": "regorus panics when the substring is empty (the call is denied); OPA answers",
    "time.parse_duration_ns": "regorus panics on a digit followed by a non-ASCII character (the call is denied), "
                              "where OPA leaves the expression undefined",
}


def divergences(modules: list[dict[str, Any]]) -> list[str]:
    """``file:line: name: how the answer may differ`` for each such builtin call in ``modules``
    (regorus's AST), in file and line order. A regex whose pattern is a literal is named only
    when the pattern holds a construct that differs; any other pattern is named."""
    found = []
    for module, name, call in builtin_calls(modules):
        if why := _why(name, call):
            file, line = module["source"]["file"], call["span"]["line"]
            found.append((file, line, f"{file}:{line}: {name}: {why}"))
    return [text for _, _, text in sorted(found)]


def _why(name: str, call: dict[str, Any]) -> str:
    if name in _CALLS:
        return _CALLS[name]
    if name not in _PATTERN_PARAM:
        return ""
    params = call.get("params") or []
    at = _PATTERN_PARAM[name]
    pattern = _literal(params[at]) if at < len(params) else None
    if pattern is not None and not _UNICODE_CONSTRUCT.search(pattern):
        return ""
    return _REGEX if pattern is not None else _REGEX + " (the pattern is not a literal: check what it can hold)"


def _literal(node: Any) -> str | None:
    for kind in ("String", "RawString"):
        if isinstance(node, dict) and isinstance(node.get(kind), dict):
            return node[kind].get("value")
    return None
