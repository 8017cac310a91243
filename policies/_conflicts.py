"""Definitions in a bundle that OPA refuses to compile and regorus loads anyway.

regorus loads a bundle with two ``default`` rules for one rule, a function and a rule of the
same name, or a data file holding a document where a rule is defined, and then decides with one
of them: which one can depend on file order, and a ``data.json`` key that shadows a rule (say
``toolgate/data.json`` with ``{"deny": []}``) turns the policy's denials off. OPA refuses each at
compile time (``multiple default rules``, ``conflicting rules``, ``conflicting rule for data
path``); ``conflicts`` finds them in the AST so the embedded engine refuses them too, and a
policy that passes ``opa check`` is the one that loads here.
"""

from __future__ import annotations

from typing import Any, Iterator

Path = tuple[str, ...]


def conflicts(modules: list[dict[str, Any]], data: dict[str, Any]) -> Iterator[str]:
    """``file:line: message`` for each conflicting definition in ``modules`` (regorus's AST, from
    ``get_ast_as_json``) and the bundle's ``data``."""
    defaults: dict[Path, tuple[str, int]] = {}
    kinds: dict[Path, dict[bool, tuple[str, int]]] = {}  # is a function -> where one was seen
    for module in modules:
        file, package = module["source"]["file"], _path(module["ast"]["package"]["refr"])
        if package is None:
            continue
        for rule in module["ast"].get("rules", []):
            found = _rule(rule)
            if found is None:
                continue
            kind, own, line = found
            path = package + own
            where = (file, line)
            if kind == "default":
                if path in defaults:
                    first = defaults[path]
                    yield (f"{file}:{line}: multiple default rules for data.{'.'.join(path)} "
                           f"(another at {first[0]}:{first[1]})")
                defaults[path] = defaults.get(path, where)
            is_function = kind == "function"
            seen = kinds.setdefault(path, {})
            other = seen.get(not is_function)
            if other is not None:
                yield (f"{file}:{line}: data.{'.'.join(path)} is defined both as a function and as a rule "
                       f"(the other at {other[0]}:{other[1]})")
            seen.setdefault(is_function, where)
            if _in_data(data, path):
                yield (f"{file}:{line}: conflicting rule for data path {'/'.join(path)}: a data file holds a "
                       "document there, which the rule would replace")


def _rule(rule: dict[str, Any]) -> tuple[str, Path, int] | None:
    """(kind: default | function | rule, the static part of its path, its line), or None."""
    if "Default" in rule:
        path = _path(rule["Default"].get("refr"))
        return None if not path else ("default", path, _line(rule))
    head = (rule.get("Spec") or {}).get("head") or {}
    for key, kind in (("Func", "function"), ("Compr", "rule"), ("Set", "rule")):
        if key in head:
            path = _path(head[key].get("refr"), static_prefix=True)
            return None if not path else (kind, path, _line(rule))
    return None


def _path(ref: Any, static_prefix: bool = False) -> Path | None:
    """The names of a reference (``a.b["c"]`` is ``(a, b, c)``); with ``static_prefix``, up to the
    first part that is not a string (``o[k]`` is ``(o,)``), else None for such a reference."""
    parts: list[str] = []
    while isinstance(ref, dict):
        if "Var" in ref:
            parts.append(ref["Var"]["value"])
            return tuple(reversed(parts))
        if "RefDot" in ref:
            parts.append(ref["RefDot"]["field"][1])
            ref = ref["RefDot"]["refr"]
        elif "RefBrack" in ref:
            index = ref["RefBrack"].get("index") or {}
            if "String" in index:
                parts.append(index["String"]["value"])
            elif static_prefix:
                parts.clear()  # everything from here on depends on the rule's body
            else:
                return None
            ref = ref["RefBrack"]["refr"]
        else:
            return None
    return None


def _line(node: Any) -> int:
    """The line of the first position found in ``node`` (0 when there is none)."""
    stack = [node]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            span = item.get("span")
            if isinstance(span, dict) and isinstance(span.get("line"), int):
                return span["line"]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return 0


def _in_data(data: dict[str, Any], path: Path) -> bool:
    """Whether ``data`` has a document at ``path``, or a value that is not an object above it."""
    node: Any = data
    for part in path:
        if not isinstance(node, dict):
            return True
        if part not in node:
            return False
        node = node[part]
    return True
