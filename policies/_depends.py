"""What each rule of a bundle refers to in ``data``, read from regorus's AST the way OPA's compiler
resolves names (``policies._recursion`` builds the dependency graph from this).

A name in a rule is the package's rule of that name (``a`` is ``data.<pkg>.a``), or what the
module's import binds (``import data.lib`` makes ``lib.f`` mean ``data.lib.f``), unless the rule
makes it local: a function's argument, ``x := ...``, ``some x``, ``some x in ...`` anywhere in the
clause's body (not inside a comprehension, whose own declarations are local to it), or an
``every``'s key and value inside that ``every``. A comparison (``a == 1``) or unification (``a =
1``) does not make ``a`` local. Each ``else`` is a clause of its own.

A reference's parts after ``data`` are constants where the source spells them (``a.b``,
``a["b"]``, ``a[1]``); ``WILD`` where OPA cannot know the value when it compiles and takes every
rule there (``a[x]`` with nothing else binding ``x``, ``a[_]``, ``a[input.k]``, ``a[count(s)]``);
``UNSURE`` where OPA may narrow the term to constants the body binds it to (``x := "k"; a[x]``,
``some x in ["k"]``): nothing past such a part counts as referred to, which errs towards loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Final, Iterator

from policies._ast import pattern_vars, span_text, unroll

Part = tuple[str, Any]
"""``("s", name)`` a string, ``("c", value)`` another scalar, or one of the markers below."""
Path = tuple[Part, ...]
"""The parts of a reference after ``data``."""

WILD: Final[Part] = ("*", None)
"""A part OPA cannot know when it compiles: every rule under it may be read."""
UNSURE: Final[Part] = ("?", None)
"""A part OPA may narrow to a few constants: what is under it is not counted."""
NO_MATCH: Final[Part] = ("#", None)
"""A constant no rule's path holds (an array or object used as a key)."""

_SCALARS = {"String": "s", "RawString": "s", "Number": "c", "Bool": "c", "Null": "c"}
_COMPREHENSIONS = ("ArrayCompr", "SetCompr", "ObjectCompr")
_COMPUTED = ("Call", "ArithExpr", "BinExpr", "UnaryExpr", "BoolExpr", "Membership", *_COMPREHENSIONS)
_ROOTS = {"data", "input"}


@dataclass(frozen=True, slots=True)
class Use:
    """One reference a rule makes into ``data``."""

    ref: Path
    file: str
    line: int
    text: str
    """The reference as the source spells it."""


@dataclass(frozen=True, slots=True)
class RuleDef:
    """One rule (with its ``else`` clauses), where OPA files it, and what it refers to."""

    key: Path
    """Its path after ``data``; a part the head computes (``o[k]``) is ``WILD``."""
    ground: int
    """How many parts of ``key`` come before the first computed one."""
    uses: tuple[Use, ...]


@dataclass(slots=True)
class _Module:
    file: str
    source: bytes
    names: dict[str, Path | None]
    """Global names: the package's rules and the imports (``None``: an import of ``input``)."""


def rule_defs(modules: list[dict[str, Any]]) -> list[RuleDef]:
    """Every rule of ``modules`` (regorus's AST, from ``get_ast_as_json``), in source order."""
    packages = {id(module): _constant_path(module["ast"]["package"]["refr"], root=False) for module in modules}
    rule_names: dict[Path, set[str]] = {}
    for module in modules:
        package = packages[id(module)]
        if package is not None:
            rule_names.setdefault(package, set()).update(_first_names(module))
    defs = []
    for module in modules:
        package = packages[id(module)]
        if package is None:
            continue
        ctx = _Module(module["source"]["file"], module["source"]["contents"].encode(),
                      _globals(module, package, rule_names[package]))
        defs += [found for rule in module["ast"].get("rules", []) if (found := _rule(ctx, package, rule))]
    return defs


def _globals(module: dict[str, Any], package: Path, rules: set[str]) -> dict[str, Path | None]:
    names: dict[str, Path | None] = {name: (*package, ("s", name)) for name in rules}
    source = module["source"]["contents"].encode()
    for imp in module["ast"].get("imports", []):
        base, _ = unroll(imp.get("refr"))
        root = (base.get("Var") or {}).get("value") if isinstance(base, dict) else None
        path = _constant_path(imp.get("refr"), root=True)
        if root not in _ROOTS or path is None:
            continue  # future.keywords, rego.v1, or a path that is not all names
        alias = span_text(source, imp.get("as")) or (path[-1][1] if path and path[-1][0] == "s" else root)
        names[alias] = path if root == "data" else None
    return names


def _constant_path(ref: Any, *, root: bool) -> Path | None:
    """The names of ``a.b["c"]`` as a path (without its first name when ``root``), or None."""
    base, parts = unroll(ref)
    if not isinstance(base, dict) or "Var" not in base:
        return None
    path = [] if root else [("s", base["Var"]["value"])]
    for part in parts:
        constant = ("s", part) if isinstance(part, str) else _constant(part)
        if constant is None or constant[0] != "s":
            return None
        path.append(constant)
    return tuple(path)


def _constant(node: Any) -> Part | None:
    if not isinstance(node, dict):
        return None
    for kind, tag in _SCALARS.items():
        if isinstance(node.get(kind), dict):
            return (tag, node[kind].get("value"))
    return None


def _first_names(module: dict[str, Any]) -> Iterator[str]:
    for rule in module["ast"].get("rules", []):
        ref, _, _ = _head(rule)
        base, _ = unroll(ref)
        if isinstance(base, dict) and "Var" in base:
            yield base["Var"]["value"]


def _head(rule: dict[str, Any]) -> tuple[Any, list[Any], list[Any]]:
    """(the head's reference, the function's arguments, the head's key and value terms)."""
    if "Default" in rule:
        default = rule["Default"]
        return default.get("refr"), default.get("args") or [], [default.get("value")]
    head = (rule.get("Spec") or {}).get("head") or {}
    kind = next((k for k in ("Compr", "Set", "Func") if k in head), None)
    if kind is None:
        return None, [], []
    spec = head[kind]
    terms = [spec.get("key"), (spec.get("assign") or {}).get("value")]
    return spec.get("refr"), spec.get("args") or [], terms


def _rule(ctx: _Module, package: Path, rule: dict[str, Any]) -> RuleDef | None:
    ref, args, terms = _head(rule)
    base, parts = unroll(ref)
    if not isinstance(base, dict) or "Var" not in base:
        return None
    key = (*package, ("s", base["Var"]["value"]),
           *(("s", part) if isinstance(part, str) else _constant(part) or WILD for part in parts))
    ground = next((i for i, part in enumerate(key) if part == WILD), len(key))
    indexes = [part for part in parts if not isinstance(part, str)]
    uses: list[Use] = []
    bodies = (rule.get("Spec") or {}).get("bodies") or [{}]
    for body in bodies:
        assign = body.get("assign")
        values = [(assign or {}).get("value")] if body.get("is_else") else terms
        uses += _clause(ctx, args, [*indexes, *values], body.get("query"))
    return RuleDef(key=key, ground=ground, uses=tuple(uses))


def _clause(ctx: _Module, args: list[Any], head: list[Any], query: Any) -> list[Use]:
    """The references of one clause: its body's, then its head's terms, with its own locals. A
    statement sees as narrowed the variables the statements before it bind (the head: all)."""
    local = frozenset(pattern_vars(args)) | _declared(query, ctx.source)
    walker = _Walker(ctx)
    bound: frozenset[str] = frozenset()
    for stmt in (query or {}).get("stmts", []):
        walker.walk(stmt, local, bound)
        bound |= _binds(stmt, lambda name: walker.is_global(name, local))
    walker.walk([args, head], local, bound)
    return walker.uses


@dataclass(slots=True)
class _Walker:
    ctx: _Module
    narrowed: frozenset[str] = frozenset()
    """Variables the statements before may bind to constants (OPA may narrow them)."""
    uses: list[Use] = field(default_factory=list)

    def walk(self, node: Any, local: frozenset[str], narrowed: frozenset[str]) -> None:
        self.narrowed = narrowed
        stack = [(node, local)]
        while stack:
            item, scope = stack.pop()
            if isinstance(item, list):
                stack.extend((x, scope) for x in item)
            elif isinstance(item, dict):
                stack.extend(self._visit(item, scope))

    def _visit(self, item: dict[str, Any], scope: frozenset[str]) -> list[tuple[Any, frozenset[str]]]:
        """Record what ``item`` refers to itself; the nested terms to walk, with their scope."""
        if isinstance(item.get("Var"), dict):
            self._record(item, item, [], scope)
            return []
        if "RefDot" in item or "RefBrack" in item:
            return self._ref(item, item, scope)
        if isinstance(item.get("Call"), dict):
            call = item["Call"]
            return [*self._ref(call.get("fcn"), call.get("fcn"), scope), (call.get("params") or [], scope)]
        compr = next((item[kind] for kind in _COMPREHENSIONS if isinstance(item.get(kind), dict)), None)
        if compr is not None:
            inner = scope | _declared(compr.get("query"), self.ctx.source)
            return [(value, inner) for value in compr.values()]
        if isinstance(item.get("Every"), dict):
            every = item["Every"]
            own = frozenset(span_text(self.ctx.source, every.get(part)) for part in ("key", "value")) - {""}
            return [(every.get("domain"), scope | own), (every.get("query"), scope | own)]
        return [(value, scope) for key, value in item.items() if key not in ("span", "SomeVars")]

    def _ref(self, node: Any, whole: Any, scope: frozenset[str]) -> list[tuple[Any, frozenset[str]]]:
        base, parts = unroll(node)
        nested = [(part, scope) for part in parts if not isinstance(part, str)]
        if not (isinstance(base, dict) and isinstance(base.get("Var"), dict)):
            return [*nested, (base, scope)]
        self._record(base, whole, parts, scope)
        return nested

    def _record(self, base: dict[str, Any], whole: Any, parts: list[Any], scope: frozenset[str]) -> None:
        root = self._root(base["Var"]["value"], scope)
        if root is None:
            return
        span = _span(whole)
        text = span_text(self.ctx.source, span) or base["Var"]["value"]
        line = span.get("line", 0)
        ref = (*root, *(("s", part) if isinstance(part, str) else self._part(part, scope) for part in parts))
        self.uses.append(Use(ref=ref, file=self.ctx.file, line=line, text=text))

    def _root(self, name: str, scope: frozenset[str]) -> Path | None:
        """The data path a name stands for here, or None (a local, ``input``, a builtin)."""
        if name == "data":
            return ()
        return None if name in scope else self.ctx.names.get(name)

    def is_global(self, name: str, scope: frozenset[str]) -> bool:
        """Whether ``name`` here is a reference (``data``, ``input``, a rule, an import), not a variable."""
        return name in _ROOTS or (name not in scope and name in self.ctx.names)

    def _part(self, node: Any, scope: frozenset[str]) -> Part:
        """What OPA knows of a reference's ``[index]`` when it compiles."""
        constant = _constant(node)
        if constant is not None:
            return constant
        if not isinstance(node, dict):
            return UNSURE
        if isinstance(node.get("Var"), dict):
            name = node["Var"]["value"]
            wild = name == "_" or self.is_global(name, scope) or name not in self.narrowed
            return WILD if wild else UNSURE
        if "RefDot" in node or "RefBrack" in node:
            base, _ = unroll(node)  # a reference into a local may be narrowed; into data or input, not
            name = (base.get("Var") or {}).get("value") if isinstance(base, dict) else None
            return WILD if name is not None and self.is_global(name, scope) else UNSURE
        if any(kind in node for kind in _COMPUTED):
            return WILD
        if any(kind in node for kind in ("Array", "Set", "Object")):
            return NO_MATCH if not _mentions_vars(node) else WILD
        return UNSURE


def _declared(query: Any, source: bytes) -> frozenset[str]:
    """The names a body declares local (``:=``, ``some``), in it and in its ``every`` bodies."""
    names: set[str] = set()
    for stmt in (query or {}).get("stmts", []):
        literal = stmt.get("literal") or {}
        expr = (literal.get("Expr") or {}).get("expr") or {}
        if (expr.get("AssignExpr") or {}).get("op") == "ColEq":
            names |= _vars(expr["AssignExpr"].get("lhs"))
        elif "SomeVars" in literal:
            names |= {span_text(source, span) for span in literal["SomeVars"].get("vars") or []}
        elif "SomeIn" in literal:
            names |= _vars([literal["SomeIn"].get("key"), literal["SomeIn"].get("value")])
        elif "Every" in literal:
            names |= _declared(literal["Every"].get("query"), source)
    return frozenset(names - {""})


def _binds(stmt: dict[str, Any], is_global: Callable[[str], bool]) -> frozenset[str]:
    """The variables a body statement may bind to constants, which OPA narrows a reference's
    variables to (``x := "a"``, ``x = y``, ``some x in ["a", "b"]``; not ``x := input.k`` or ``x :=
    count(s)``). Every variable of a pattern counts, which errs towards loading."""
    literal = stmt.get("literal") or {}
    if stmt.get("with_mods") or "NotExpr" in literal:
        return frozenset()
    assign = ((literal.get("Expr") or {}).get("expr") or {}).get("AssignExpr")
    some = literal.get("SomeIn")
    found: set[str] = set()
    if isinstance(assign, dict):
        for side, other in (("lhs", "rhs"), ("rhs", "lhs")):
            if _may_be_constant(assign.get(other), is_global):
                found |= _vars(assign.get(side))
    if isinstance(some, dict) and _may_be_constant(some.get("collection"), is_global):
        found |= _vars([some.get("key"), some.get("value")])
    return frozenset(found)


def _may_be_constant(node: Any, is_global: Callable[[str], bool]) -> bool:
    """Whether OPA might know the values of ``node`` when it compiles: not if it reads data, input
    or a rule, or computes them."""
    if not isinstance(node, dict) or _constant(node) is not None:
        return True
    base, parts = unroll(node)
    if isinstance(base, dict) and isinstance(base.get("Var"), dict):
        return not is_global(base["Var"]["value"])
    if parts:  # an index into a literal (``["a", "b"][_]``)
        return True
    if any(kind in node for kind in _COMPUTED):
        return False
    return not _mentions_vars(node)


def _vars(node: Any) -> set[str]:
    found = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if isinstance(item.get("Var"), dict):
                found.add(item["Var"]["value"])
            else:
                stack.extend(value for key, value in item.items() if key != "span")
    return found


def _span(node: Any) -> dict[str, Any]:
    """The position of a term (``{"Var": {"span": ...}}``), or ``{}``."""
    inner = next(iter(node.values()), None) if isinstance(node, dict) else None
    span = inner.get("span") if isinstance(inner, dict) else None
    return span if isinstance(span, dict) else {}


def _mentions_vars(node: Any) -> bool:
    return bool(_vars(node))
