"""Where a tool schema's references lead: into the schema itself, or nowhere.

jsonschema resolves a ``$ref`` it cannot find in the document by fetching its URI with
``urlopen``: blocking, with no timeout, on every validation that reaches it. A tool schema
naming ``https://…`` would make the gateway fetch it on the event loop during argument
validation, outside every egress control, and let whoever serves that URI decide what the tool
accepts. So references are never retrieved here: ``LOCAL_ONLY`` is the registry the gateway's
validators use (jsonschema adds the meta-schemas it ships, which need no fetching), and
``reference_problems`` resolves every ``$ref`` and ``$dynamicRef`` when the schema loads, so a
reference that leads nowhere is refused with the tool's config instead of failing every call.

A reference may also point into a part of the document that is not a subschema position
(``{"$ref": "#/x/y"}``), which the meta-schema check of the document never looked at as a
schema; the caller's ``as_schema`` checks each target (an uncompilable ``pattern``, an unknown
``format`` there would otherwise surface at call time).
"""

from __future__ import annotations

from typing import Any, Callable

from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

LOCAL_ONLY: Registry = Registry()
"""A registry that retrieves nothing: an unknown URI is unresolvable."""

_SHIPPED = {id(resource.contents) for resource in SPECIFICATIONS.values()}
"""The meta-schemas jsonschema knows without fetching: valid as they are."""


def reference_problems(schema: Any, as_schema: Callable[[Any], list[str]]) -> list[str]:
    """Why a reference in ``schema`` cannot be used: it resolves nowhere in the document (or
    would need fetching), or ``as_schema`` finds problems in what it points at."""
    problems: list[str] = []
    checked: set[int] = set()
    pending = [(schema, SPECIFICATIONS.combine(LOCAL_ONLY).resolver_with_root(DRAFT202012.create_resource(schema)))]
    while pending:
        subschema, resolver = pending.pop()
        if not isinstance(subschema, dict):
            continue
        resolver = resolver.in_subresource(DRAFT202012.create_resource(subschema))  # as jsonschema descends
        for keyword in ("$ref", "$dynamicRef"):
            ref = subschema.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                target = resolver.lookup(ref)
            except Unresolvable:
                problems.append(f"{keyword} {ref!r} does not resolve within the schema (references are never "
                                "fetched: put the definition under $defs and refer to it as '#/$defs/…')")
                continue
            if id(target.contents) in checked or id(target.contents) in _SHIPPED:
                continue
            checked.add(id(target.contents))
            problems += [f"at {keyword} {ref!r}: {p}" for p in as_schema(target.contents)]
            pending.append((target.contents, target.resolver))
        pending += [(child, resolver) for child in DRAFT202012.subresources_of(subschema)]
    return list(dict.fromkeys(problems))  # a target inside the document is walked twice
