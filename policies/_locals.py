"""Which variable each name of a rule's body stands for, as OPA's compiler tells them apart before
its safety check (``compile.go``: ``rewriteLocalVars``).

A variable a body declares (``x := ...``, ``some x``, ``some x in ...``, an ``every``'s key and
value) is a new one from its declaration on, in that body and the comprehensions and ``every``
bodies in it, whatever the same name means around it: ``x := 1; c := [x | x := 2]`` holds two
``x``. A name used before its declaration (``x := {"k": x}``'s right side, a statement before it)
or never declared is the one around, if any, else the body's own; but in an ``every``, which OPA
reads twice, a name a comprehension used before the ``every``'s body declared it is that one.

``resolve`` marks each variable of a body with the one it stands for (the key ``"local"``, ``x@3``
for a declared one; read it with ``policies._safety.name``) and tells what OPA refuses there: a
``some`` or ``every`` declaration nothing uses (``declared var x unused``), a name declared in a
body that used it before (``var x referenced above``), and one ``some ... in`` binds and reads in
what it iterates (``var x assigned before``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies._ast import CLOSURES, all_vars, pattern_var_nodes, scan, span_text


@dataclass(frozen=True, slots=True)
class Declared:
    """A variable ``some`` or ``every`` declares."""

    local: str
    line: int
    every: bool
    """Declared by an ``every`` (its key or value), else by ``some x``."""


@dataclass(slots=True)
class Locals:
    """What ``resolve`` found in a body."""

    unused: list[Declared] = field(default_factory=list)
    """Each ``some``/``every`` declaration nothing uses."""
    above: list[tuple[str, int]] = field(default_factory=list)
    """Each (name, line) declared in a body after it was used there (OPA: ``var x referenced above``)."""
    before: list[tuple[str, int]] = field(default_factory=list)
    """Each (name, line) ``some ... in`` binds and reads in its collection (OPA: ``var x assigned before``)."""
    somes: set[str] = field(default_factory=set)
    """The locals ``some x`` alone declared."""
    everies: dict[int, frozenset[str]] = field(default_factory=dict)
    """``id`` of an ``every`` statement -> the locals it declares (its key and value)."""


@dataclass(slots=True)
class _Resolver:
    """Walks one body in order, with a scope for each body in it (``stack``: name -> local)."""

    source: bytes
    found: Locals
    stack: list[dict[str, str]] = field(default_factory=list)
    tracked: dict[str, Declared] = field(default_factory=dict)
    """What ``some`` and ``every`` declared, by local: OPA refuses one nothing uses."""
    used: set[str] = field(default_factory=set)
    args: set[str] = field(default_factory=set)
    made: int = 0

    def declare(self, name: str, node: dict[str, Any] | None = None, line: int = 0, every: bool | None = None) -> str:
        if self.stack[-1].get(name) == name and name not in self.args:  # used here before, as the one around
            self.found.above.append((name, line or ((node or {}).get("span") or {}).get("line", 0)))
        self.made += 1
        local = f"{name}@{self.made}"
        self.stack[-1][name] = local
        if node is not None:
            node["local"] = local
        if every is not None:
            self.tracked[local] = Declared(local, line, every)
        return local

    def use(self, node: dict[str, Any]) -> None:
        name = node.get("value", "")
        if name == "_":
            return
        local = next((scope[name] for scope in reversed(self.stack) if name in scope), None)
        if local is None:
            local = self.stack[-1][name] = name
        node["local"] = local
        self.used.add(local)

    def terms(self, node: Any) -> None:
        """Resolve the variables of ``node``, and the comprehensions in it (each a scope)."""
        for kind, item, _ in scan(node):
            if kind == "Var":
                self.use(item)
            elif kind in CLOSURES:
                self.stack.append({})
                self.body((item.get("query") or {}).get("stmts") or [])
                self.terms([item.get(part) for part in ("term", "key", "value")])
                self.stack.pop()

    def body(self, stmts: list[dict[str, Any]]) -> None:
        for stmt in stmts:
            literal = stmt.get("literal") or {}
            withs = [mod.get("as") for mod in stmt.get("with_mods") or []]
            assign = ((literal.get("Expr") or {}).get("expr") or {}).get("AssignExpr") or {}
            if "SomeVars" in literal:
                for span in literal["SomeVars"].get("vars") or []:
                    local = self.declare(span_text(self.source, span), line=span.get("line", 0), every=False)
                    self.found.somes.add(local)
            elif "SomeIn" in literal:  # what it binds is declared, then the rest read
                some = literal["SomeIn"]
                binds = {item["value"] for kind, item, where in scan([some.get("key"), some.get("value")])
                         if kind == "Var" and where not in ("base", "key") and item.get("value") != "_"}
                for kind, item, _ in scan(some.get("collection")):
                    if kind == "Var" and item.get("value") in binds:
                        self.found.before.append((item["value"], (item.get("span") or {}).get("line", 0)))
                self._pattern([some.get("key"), some.get("value")])
                self.terms([some.get("key"), some.get("value"), some.get("collection"), withs])
            elif "Every" in literal:
                every = literal["Every"]
                self.terms([every.get("domain"), withs])
                self.stack.append({})
                own = []
                for part in ("key", "value"):
                    name = span_text(self.source, every.get(part))
                    if name and name != "_":
                        own.append(self.declare(name, line=every[part].get("line", 0), every=True))
                self.found.everies[id(every)] = frozenset(own)
                self.body((every.get("query") or {}).get("stmts") or [])
                self._again([every.get("domain"), every.get("query")])
                self.stack.pop()
            elif assign.get("op") == "ColEq":  # the right side first: a name there is the one around
                self.terms([assign.get("rhs"), withs])
                self._pattern([assign.get("lhs")])
            else:
                self.terms([literal, withs])

    def _again(self, nodes: list[Any]) -> None:
        """OPA reads a whole ``every`` again once its body is read, its scope still on: a name still
        standing for itself (in a comprehension, read before the body declared it) now stands for
        what the body declared (``every v in xs { c := [1 | y == v]; y := 1 }``: one ``y``)."""
        for var in all_vars(nodes):
            name = var.get("value", "")
            if name != "_" and var.get("local", name) == name:
                local = next((scope[name] for scope in reversed(self.stack) if name in scope), name)
                if local != name:
                    var["local"] = local

    def _pattern(self, terms: list[Any]) -> None:
        """Declare the variables of a pattern (arrays, an object's values), as ``:=`` does."""
        for var in pattern_var_nodes(terms):
            if var.get("value") != "_":
                self.declare(var["value"], var)


def resolve(source: bytes, args: list[Any], stmts: list[dict[str, Any]], made: list[Any]) -> Locals:
    """Mark the variables of one body (``stmts``, of a rule with arguments ``args`` whose result is
    ``made``: a head's terms or an ``else``'s value) with the variable each stands for; what the
    body declares and nothing uses."""
    resolver = _Resolver(source, Locals())
    resolver.stack.append({})
    for kind, item, _ in scan(args):
        if kind == "Var" and item.get("value") != "_":
            resolver.stack[-1][item["value"]] = item["value"]
            resolver.args.add(item["value"])
            item["local"] = item["value"]
    resolver.body(stmts)
    resolver.terms(made)  # the head reads what the body declared
    resolver.found.unused = [d for local, d in resolver.tracked.items() if local not in resolver.used]
    return resolver.found
