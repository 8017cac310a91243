"""Where a tool schema's references lead: into the schema itself, or nowhere.

jsonschema resolves a ``$ref`` it cannot find in the document by fetching its URI with
``urlopen``: blocking, with no timeout, on every validation that reaches it. A tool schema
naming ``https://…`` would make the gateway fetch it on the event loop during argument
validation, outside every egress control, and let whoever serves that URI decide what the tool
accepts. So references are never retrieved here: ``LOCAL_ONLY`` is the registry the gateway's
validators use, and ``reference_problems`` resolves every ``$ref`` and ``$dynamicRef`` when the
schema loads, so a reference that leads nowhere is refused with the tool's config instead of
failing every call.

A reference to one of the meta-schemas jsonschema ships (``https://json-schema.org/…``) is
refused too, though jsonschema would resolve it without fetching: that part of the arguments
would be validated by jsonschema's own class, named by the meta-schema's ``$schema``, with
Python ``re`` patterns and its quadratic ``uniqueItems`` (seconds of a held loop for a 50 KB
argument), not by the gateway's (``gateway.ecma_regex``).

A reference may point into a part of the document that is not a subschema position
(``{"$ref": "#/x/y"}``), which the meta-schema check of the document never looked at as a
schema; the caller's ``as_schema`` checks each target (an uncompilable ``pattern`` or an unknown
``format`` there would otherwise surface at call time). And references that lead back to where
they started without reaching into the arguments (``{"$ref": "#"}`` at the top, two definitions
naming each other, or through ``allOf``, ``not``, ``if`` …) would recurse without end on every
call: such a cycle is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

if TYPE_CHECKING:
    from referencing._core import Resolver

LOCAL_ONLY: Registry = Registry()
"""A registry that retrieves nothing: an unknown URI is unresolvable."""

_REFERENCES = ("$ref", "$dynamicRef")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE = ("not", "if", "then", "else")
"""Keywords that apply a subschema to the same instance, not to a part of it (with
``dependentSchemas`` and the references)."""


def reference_problems(schema: Any, as_schema: Callable[[Any], list[str]]) -> list[str]:
    """Why a reference in ``schema`` cannot be used: it resolves nowhere in the document (or
    would need fetching), ``as_schema`` finds problems in what it points at, or it is part of a
    cycle that never reaches into the arguments."""
    problems: list[str] = []
    checked: set[int] = set()
    walked: list[tuple[dict[str, Any], Resolver]] = []
    pending = [(schema, LOCAL_ONLY.resolver_with_root(DRAFT202012.create_resource(schema)))]
    while pending:
        subschema, resolver = pending.pop()
        if not isinstance(subschema, dict):
            continue
        walked.append((subschema, resolver))
        resolver = resolver.in_subresource(DRAFT202012.create_resource(subschema))  # as jsonschema descends
        for keyword in _REFERENCES:
            ref = subschema.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                target = resolver.lookup(ref)
            except Unresolvable:
                problems.append(f"{keyword} {ref!r} does not resolve within the schema (references are never "
                                "fetched: put the definition under $defs and refer to it as '#/$defs/…')")
                continue
            if id(target.contents) not in checked:
                checked.add(id(target.contents))
                problems += [f"at {keyword} {ref!r}: {p}" for p in as_schema(target.contents)]
                pending.append((target.contents, target.resolver))
        pending += [(child, resolver) for child in DRAFT202012.subresources_of(subschema)]
    if not problems:  # a cycle is only looked for along references that resolve
        problems += _cycles(walked)
    return list(dict.fromkeys(problems))  # a target inside the document is walked twice


def _cycles(walked: list[tuple[dict[str, Any], Resolver]]) -> list[str]:
    """A reference that leads back to a schema it is applied from, on the same instance: a depth-first
    search along the keywords that apply a subschema in place, from every schema the walk met."""
    on_path: set[int] = set()
    done: set[int] = set()

    def visit(subschema: Any, resolver: Resolver) -> Iterator[str]:
        if not isinstance(subschema, dict) or id(subschema) in done:
            return
        on_path.add(id(subschema))
        resolver = resolver.in_subresource(DRAFT202012.create_resource(subschema))
        for keyword, ref, target, inner in _applied_in_place(subschema, resolver):
            if id(target) in on_path:
                at = f"{keyword} {ref!r}" if ref else keyword
                yield (f"references lead back to a schema they are applied from (at {at}) without reaching into "
                       "the arguments: validating would recurse without end")
            else:
                yield from visit(target, inner)
        on_path.discard(id(subschema))
        done.add(id(subschema))

    return [problem for subschema, resolver in walked for problem in visit(subschema, resolver)]


def _applied_in_place(subschema: dict[str, Any], resolver: Resolver) -> Iterator[tuple[str, str, Any, Resolver]]:
    """(keyword, reference or "", subschema, its resolver) for each subschema applied to the same instance."""
    for keyword in _REFERENCES:
        if isinstance(ref := subschema.get(keyword), str):
            target = resolver.lookup(ref)
            yield keyword, ref, target.contents, target.resolver
    for keyword in _IN_PLACE_LISTS:
        children = subschema.get(keyword)
        for child in children if isinstance(children, list) else ():
            yield keyword, "", child, resolver
    for keyword in _IN_PLACE:
        if keyword in subschema:
            yield keyword, "", subschema[keyword], resolver
    dependent = subschema.get("dependentSchemas")
    for child in dependent.values() if isinstance(dependent, dict) else ():
        yield "dependentSchemas", "", child, resolver
