"""Rules and functions that depend on themselves, which OPA refuses and regorus loads anyway.

OPA refuses to compile a bundle where a rule or function depends on itself, directly (``a if a``,
``f(x) := f(x - 1)``) or through others (``a if b``, ``b if a``), across packages and imports, in
comprehensions, ``every``, ``not``, ``with`` and ``else`` alike (``rego_recursion_error``). regorus
loads such a bundle and fails every evaluation that reaches the cycle, so the gateway started and
``toolgate policy check`` passed a policy that denied those calls. ``recursive_rules`` finds the
cycles in regorus's AST as OPA's compiler does (``compile.go``: ``NewRuleTree``, ``NewGraph``,
``GetRulesDynamicWithOpts``, ``checkRecursion``):

- A rule is filed under its path up to the first part its head computes (``o[k].c`` under ``o``).
- A reference depends on the rules along its path and, where it ends, on every rule below it:
  ``data.<pkg>`` (or ``data``) inside that package depends on each of its rules, itself included;
  ``a.b`` on ``a.b`` and what is below it, not on ``a.c``. A part OPA cannot know when it compiles
  (``data.<pkg>[input.k]``, ``[_]``) takes every rule there; OPA calls the cycles these close
  "may be recursive", and refuses them as well.
- Rules of one path (several files, ``else`` clauses, one function's clauses) are one node.

What this leaves out errs towards loading (``policies._depends``): a part the body may bind to
constants (``k := "a"; data.x[k]``), where OPA follows the constants and this looks no further, and
the rules of a package whose name is not all plain names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from policies._depends import NO_MATCH, UNSURE, WILD, Part, Path, Use, rule_defs

Graph = dict[Path, dict[Path, Use]]  # rule -> the rules it reads -> the first reference that does
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(slots=True)
class _Node:
    """A node of OPA's rule tree: the rules filed here, and the nodes below."""

    rules: dict[Path, None] = field(default_factory=dict)
    children: dict[Part, _Node] = field(default_factory=dict)


def recursive_rules(modules: list[dict[str, Any]]) -> Iterator[str]:
    """``file:line: rego_recursion_error: message`` for each cycle among the rules of ``modules``
    (regorus's AST, from ``get_ast_as_json``), naming the rules along it."""
    defs = rule_defs(modules)
    tree = _Node()
    for rule in defs:
        _file(tree, rule.key, rule.ground)
    graph: Graph = {}
    for rule in defs:
        edges = graph.setdefault(rule.key, {})
        for use in rule.uses:
            for target in _select(tree, use.ref):
                if target not in edges or (not _static(edges[target], target) and _static(use, target)):
                    edges[target] = use
    for cycle in _cycles(graph):
        yield _describe(cycle, graph)


def _file(tree: _Node, key: Path, ground: int) -> None:
    node = tree
    for part in key[:ground]:
        node = node.children.setdefault(part, _Node())
    node.rules[key] = None


def _select(tree: _Node, ref: Path) -> set[Path]:
    """The rules a reference (its parts after ``data``) may read, as OPA's
    ``GetRulesDynamicWithOpts`` finds them; nothing past an ``UNSURE`` part."""
    found: set[Path] = set()
    stack = [(tree, 0)]
    while stack:
        node, i = stack.pop()
        if i >= len(ref):
            found |= _below(node)
            continue
        if ref[i] == UNSURE:
            continue
        children = node.children.items() if ref[i] == WILD else [(ref[i], node.children.get(ref[i]))]
        for _, child in children:
            if child is not None:
                found.update(key for key in child.rules if _may_intersect(key, ref, i + 1))
                stack.append((child, i + 1))
    return found


def _below(node: _Node) -> set[Path]:
    found: set[Path] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        found.update(item.rules)
        stack.extend(item.children.values())
    return found


def _may_intersect(key: Path, ref: Path, start: int) -> bool:
    """Whether a rule filed above its full path (``o[k].c``) may be what ``ref`` reads: no two
    constants differ past ``start`` (a part the body may narrow counts as differing)."""
    for mine, theirs in zip(key[start:], ref[start:]):
        if mine == WILD:
            continue
        if theirs == UNSURE or (theirs != WILD and theirs != mine):
            return False
    return True


def _static(use: Use, target: Path) -> bool:
    """Whether ``use`` reads ``target`` whatever its variables hold (OPA's "is recursive", not
    "may be")."""
    return all(part not in (WILD, UNSURE) or mine == WILD for part, mine in zip(use.ref, target))


def _cycles(graph: Graph) -> Iterator[list[Path]]:
    """Each cycle a depth-first walk meets, as the rules along it (the first one again at the end)."""
    state: dict[Path, bool] = {}  # True while on the walk's path, False once done
    for root in graph:
        if root in state:
            continue
        path, pending = [root], [iter(graph[root])]
        state[root] = True
        while pending:
            target = next(pending[-1], None)
            if target is None:
                state[path.pop()] = False
                pending.pop()
            elif state.get(target):
                yield path[path.index(target):] + [target]
            elif target not in state:
                state[target] = True
                path.append(target)
                pending.append(iter(graph.get(target, {})))


def _describe(cycle: list[Path], graph: Graph) -> str:
    edges = [(graph[a][b], b) for a, b in zip(cycle, cycle[1:])]
    first, chain = edges[0][0], " -> ".join(_rule_name(key) for key in cycle)
    where = f"{first.file}:{first.line}: rego_recursion_error: rule {_rule_name(cycle[0])}"
    dynamic = next(((use, target) for use, target in edges if not _static(use, target)), None)
    if dynamic is None:
        return (f"{where} is recursive: {chain} (a rule or function cannot depend on itself, directly or "
                f"through others: break the cycle)")
    use, target = dynamic
    return (f"{where} may be recursive: {chain} ({use.text} at {use.file}:{use.line} could refer to "
            f"{_rule_name(target)}: name the rules it should read instead of computing the path)")


def _rule_name(key: Path) -> str:
    """``data.a.b["c-d"][_]`` for a rule's path."""
    text = "data"
    for kind, value in key:
        if kind == "s" and _IDENT.match(value):
            text += f".{value}"
        elif (kind, value) in (WILD, UNSURE, NO_MATCH):
            text += "[_]"
        else:
            text += f"[{json.dumps(value)}]"
    return text
