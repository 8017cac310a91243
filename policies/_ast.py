"""Reading regorus's AST (``Engine.get_ast_as_json``): names of references, packages and imports."""

from __future__ import annotations

from typing import Any


def ref_name(ref: Any) -> str | None:
    """``a.b.c`` for a reference of names (``a.b.c``, ``a["b"].c``), else None."""
    if not isinstance(ref, dict):
        return None
    if "Var" in ref:
        return ref["Var"]["value"]
    if "RefDot" in ref:
        base = ref_name(ref["RefDot"]["refr"])
        return f"{base}.{ref['RefDot']['field'][1]}" if base else None
    if "RefBrack" in ref:  # a["b"] is a.b; an index that is not a string is no name
        index = (ref["RefBrack"].get("index") or {}).get("String")
        base = ref_name(ref["RefBrack"]["refr"])
        return f"{base}.{index['value']}" if base and isinstance(index, dict) else None
    return None


def package_name(module: dict[str, Any]) -> str:
    """A module's package, dotted (``""`` when it is not a plain dotted name)."""
    return ref_name(module["ast"]["package"]["refr"]) or ""


def import_aliases(module: dict[str, Any]) -> set[str]:
    """The names a module's imports bind: ``import data.a.b`` binds ``b``, ``... as x`` binds ``x``."""
    source = module["source"]["contents"].encode()
    aliases = set()
    for imp in module["ast"].get("imports", []):
        alias = imp.get("as")
        if alias:  # a span (byte offsets) in the source, not the name
            aliases.add(span_text(source, alias))
        else:
            aliases.add((ref_name(imp.get("refr")) or "").rsplit(".", 1)[-1])
    return aliases - {""}


def span_text(source: bytes, span: Any) -> str:
    """The source text a span (byte offsets) covers, or ``""``."""
    if not isinstance(span, dict) or "start" not in span:
        return ""
    return source[span["start"] : span["end"]].decode()


def unroll(ref: Any) -> tuple[Any, list[Any]]:
    """A reference's base term and its parts, in order: ``a.b[c]`` is ``($a, ["b", $c])``, a
    ``.field`` as its name (a string) and a ``[index]`` as its term (an AST node)."""
    parts: list[Any] = []
    while isinstance(ref, dict) and ("RefDot" in ref or "RefBrack" in ref):
        if "RefDot" in ref:
            parts.append(ref["RefDot"]["field"][1])
            ref = ref["RefDot"]["refr"]
        else:
            parts.append(ref["RefBrack"].get("index"))
            ref = ref["RefBrack"]["refr"]
    return ref, parts[::-1]
