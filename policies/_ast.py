"""Reading regorus's AST (``Engine.get_ast_as_json``): names of references, packages, imports and
rules, and the variables, calls and comprehensions of a term."""

from __future__ import annotations

from typing import Any, Iterator


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


CLOSURES = ("ArrayCompr", "SetCompr", "ObjectCompr")
"""The comprehensions: terms with a body of their own, which OPA checks as a scope of its own."""
_CLOSURES = frozenset(CLOSURES)
_SCALARS = frozenset({"String", "RawString", "Number", "Bool", "Null"})


def scan(node: Any, refs: bool = False) -> Iterator[tuple[str, dict[str, Any], str]]:
    """The variables, calls and comprehensions of an AST fragment, outside comprehensions (which
    are yielded, not entered), as ``(kind, node, where)``: ``kind`` is ``"Var"``, ``"Call"`` or the
    comprehension's kind; ``where`` is ``"base"`` for a reference's first name (``x`` of ``x.a``, also
    inside another's brackets), ``"index"`` inside a reference's ``[index]`` (not inside a call there),
    ``"key"`` inside an object's key and ``"set"`` inside a set's element (outside a reference's
    brackets), else ``""``. A call's function name is no variable. With ``refs``, a reference is
    yielded whole instead (``("Ref", {"RefDot": ...}, where)``), not entered."""
    stack: list[tuple[Any, str]] = [(node, "")]
    push, pop = stack.append, stack.pop
    while stack:
        item, where = pop()
        if type(item) is list:
            for value in item:
                kind = type(value)
                if kind is dict or kind is list:
                    push((value, where))
            continue
        if type(item) is not dict:
            continue
        if len(item) == 1:  # a term or a literal: {"Kind": {...}}
            kind, inner = next(iter(item.items()))
            if type(inner) is dict:
                if kind in _SCALARS:
                    continue
                if kind == "Var" or kind in _CLOSURES:
                    yield kind, inner, where
                    continue
                if kind == "Call":  # its arguments are its input, wherever the call is
                    yield kind, inner, where
                    push((inner.get("params"), ""))
                    continue
                if kind == "RefDot" or kind == "RefBrack":
                    if refs:
                        yield "Ref", item, where
                        continue
                    push((inner.get("refr"), "base" if not where or where == "index" else where))
                    if kind == "RefBrack":
                        push((inner.get("index"), "index"))
                    continue
                if not where and kind == "Object":
                    for entry in inner.get("fields") or []:
                        if len(entry) == 3:
                            push((entry[1], "key"))
                            push((entry[2], ""))
                    continue
                if not where and kind == "Set":
                    push((inner.get("items"), "set"))
                    continue
                item = inner  # a wrapper ({"Expr": {...}}): what it wraps
        for key, value in item.items():
            kind = type(value)
            if (kind is dict or kind is list) and key != "span":
                push((value, where))


def pattern_vars(args: list[Any]) -> Iterator[str]:
    """The variables a pattern binds (a side of ``=`` or ``:=``, ``some ... in``'s key and value;
    ``policies._depends`` reads a function's arguments so too): in arrays and object values, not
    in keys, sets, comprehensions, references or calls (as in OPA)."""
    for var in pattern_var_nodes(args):
        yield var["value"]


def pattern_var_nodes(args: list[Any]) -> Iterator[dict[str, Any]]:
    """``pattern_vars``, as the variables' nodes (``{"value": ..., "span": ...}``)."""
    stack = list(args)
    while stack:
        item = stack.pop()
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("Var"), dict):
            yield item["Var"]
        elif isinstance(item.get("Array"), dict):
            stack.extend(item["Array"].get("items") or [])
        elif isinstance(item.get("Object"), dict):
            stack.extend(entry[2] for entry in item["Object"].get("fields") or [] if len(entry) == 3)


def rule_names(ast: dict[str, Any]) -> set[str]:
    """The first names of a module's rules and functions (``a`` of ``a.b[x] := ...``)."""
    names = set()
    for rule in ast.get("rules", []):
        spec_head = (rule.get("Spec") or {}).get("head") or {}
        head = rule["Default"] if "Default" in rule else next(iter(spec_head.values()), {})
        ref = head.get("refr") if isinstance(head, dict) else None
        while isinstance(ref, dict) and "Var" not in ref:
            ref = next((ref[k]["refr"] for k in ("RefDot", "RefBrack") if k in ref), None)
        if isinstance(ref, dict):
            names.add(ref["Var"]["value"])
    return names


def with_globals(modules: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], frozenset[str]]]:
    """Each module with the names in it that are no variables: ``input``, ``data``, the rules of
    its package (in any of its modules) and what its imports bind."""
    rules: dict[str, set[str]] = {}
    for module in modules:
        rules.setdefault(package_name(module), set()).update(rule_names(module["ast"]))
    for module in modules:
        yield module, frozenset({"input", "data"} | rules[package_name(module)] | import_aliases(module))


def all_vars(node: Any, skip: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """Every variable of an AST fragment (its ``{"value": ..., "span": ...}``), inside comprehensions
    and ``every`` bodies too, but where ``skip`` (see ``scan``)."""
    stack = [node]
    while stack:
        for kind, item, where in scan(stack.pop()):
            if kind == "Var":
                if where not in skip:
                    yield item
            elif kind in _CLOSURES:
                stack.append([value for key, value in item.items() if key != "span"])


def builtin_calls(modules: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(module, dotted name, ``Call`` node) of every call that names a builtin. A user function is
    called by its name in its own package, through an import, or by ``data.<path>``; any other
    name is a builtin, whatever functions other packages define."""
    functions: dict[str, set[str]] = {}  # package -> its functions, as called from inside it
    for module in modules:
        functions.setdefault(package_name(module), set()).update(_function_names(module["ast"]))
    for module in modules:
        local, aliases = functions[package_name(module)], import_aliases(module)
        for name, call in _calls(module["ast"]):
            if not (name.startswith("data.") or name in local or name.split(".", 1)[0] in aliases):
                yield module, name, call


def _calls(node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted name, ``Call`` node) of every function call in an AST fragment."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            call = item.get("Call")
            if isinstance(call, dict) and (name := ref_name(call.get("fcn"))):
                yield name, call
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _function_names(ast: dict[str, Any]) -> set[str]:
    names = set()
    for rule in ast.get("rules", []):
        head = (rule.get("Spec") or {}).get("head") or {}
        if "Func" in head:
            names.add(ref_name(head["Func"].get("refr")) or "")
    return names - {""}
