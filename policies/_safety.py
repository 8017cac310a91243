"""OPA's model of what binds a variable, over regorus's AST: a body's expressions as OPA's compiler
(v1.22) rewrites them before its safety check, and what each binds once others are bound
(``compile.go``: ``rewriteExprTerms``, ``rewriteWithModifiers``, ``rewriteSomeDeclStatement``,
``rewriteComprehensionTerms``, ``rewriteRefsInHead``, ``outputVarsForExpr``; ``unify.go``).
``policies._bodies`` runs the check itself, over variables ``policies._locals`` told apart.

- A call nested in a term is an expression of its own whose output is a new variable
  (``x == count(input.a[y])`` is ``count(input.a[y], $1); x == $1``), also under ``not``; a
  reference's composite base, a ``with`` value, an ``every``'s domain and a head's (or a
  comprehension's) term that reads a reference are assigned first (``[1, 2][i]`` is ``$1 = [1, 2];
  $1[i]``); ``some v in xs`` is ``v = xs[$k]``.
- ``=`` and ``:=`` unify: a variable against anything but an unbound reference or pattern is bound
  (``x = 1``), an array or an object's values element by element, a pattern against a bound
  reference whole; never an object's key (``{k: 1} = input.m`` binds no ``k``).
- A reference whose base is bound binds the variables in its brackets (``input.m[y]``), and those
  of a comprehension there.
- A call binds its output arguments (the ones past its function's arity) once its inputs are
  bound; ``==``, ``!=``, ``<``, ``in``, ``print`` and the like bind nothing.
- A negated expression binds nothing, nor one whose ``with`` value is not yet bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from policies._ast import CLOSURES, all_vars, ref_name, scan, span_text, unroll

REFS = ("RefDot", "RefBrack")
CALLS = frozenset({"Call", "BoolExpr", "ArithExpr", "BinExpr", "Membership", "UnaryExpr"})
"""The terms OPA reads as calls (``==`` is ``equal``, ``+`` ``plus``, ``in`` ``internal.member_2``)."""
_COMPOSITE = frozenset({"Array", "Set", "Object", *CLOSURES})
_NOT_INPUT = ("base", "key", "set")  # what OPA leaves out of a call's inputs and outputs
_NOT_UNIFIED = ("base", "key")  # ... and of a pattern it binds whole


@dataclass(slots=True)
class Expr:
    """One expression of a body as OPA's compiler checks it, after its rewriting."""

    kind: str
    """``"eq"`` (``=``, ``:=``: terms ``[lhs, rhs]``), ``"call"``, ``"term"`` or ``"every"``."""
    terms: list[Any]
    stmt: int
    """The index of the statement it comes from (what a head adds: one past the last)."""
    inputs: int | None = None
    """A call's input count (the terms past it are outputs); None until its function's arity is asked."""
    fcn: str = ""
    negated: bool = False
    assign: bool = False
    """``:=``: its left side binds, it is never bound by the right."""
    withs: list[Any] = field(default_factory=list)
    every: dict[str, Any] | None = None
    needs: dict[str, int] = field(default_factory=dict)
    """Its variables outside comprehensions, each with its first line: all must be bound for it to run."""
    closures: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Its comprehensions and ``every`` (kind, node), checked as scopes of their own."""
    text: str | None = None
    """A statement's own expression: its source, to tell two equal ones (OPA's ``Expr.Equal``); None
    for another, or one holding a variable OPA makes (each differs)."""

    def survey(self) -> Expr:
        """Fill ``needs`` and ``closures`` in."""
        for kind, item, _ in scan(self.terms + self.withs):
            if kind == "Var":
                var, line = name(item), (item.get("span") or {}).get("line", 0)
                if var not in self.needs or line < self.needs[var]:
                    self.needs[var] = line
            elif kind in CLOSURES:
                self.closures.append((kind, item))
        if self.every is not None:
            self.closures.append(("Every", self.every))
        if self.closures or any(var[0] in "$_" for var in self.needs):
            self.text = None
        return self


class Rewriter:
    """Makes OPA's expressions of statements and terms, with new variables ``$1``, ``$2``, ... (no
    Rego name starts so)."""

    __slots__ = ("made", "source")

    def __init__(self, source: bytes) -> None:
        self.made = 0
        self.source = source

    def var(self, near: Any) -> dict[str, Any]:
        """A new variable, placed at ``near``'s span."""
        self.made += 1
        span = next(iter(near.values()), {}).get("span") if isinstance(near, dict) else None
        return {"Var": {"value": f"${self.made}", "span": span or {}}}

    def statement(self, stmt: dict[str, Any], index: int, out: list[Expr]) -> None:
        """Append the expressions OPA makes of one statement of a body to ``out``."""
        literal = stmt.get("literal") or {}
        withs = [self.assigned(mod.get("as"), out, index) for mod in stmt.get("with_mods") or []]
        if "SomeIn" in literal:  # ``some k, v in xs`` is ``v = xs[k]``
            some = literal["SomeIn"]
            ref = {"RefBrack": {"refr": some.get("collection"), "index": some.get("key") or self.var(some)}}
            out.append(Expr("eq", [self.expand(term, out, index, withs) for term in (some.get("value"), ref)], index,
                            withs=withs))
        elif "Every" in literal:
            every = literal["Every"]
            domain = every.get("domain")
            if kind_of(domain) not in CALLS:
                domain = self.assigned(domain, out, index, withs, always=True)
            out.append(Expr("every", [self.expand(domain, out, index, withs)], index, withs=withs, every=every))
        elif "Expr" in literal or "NotExpr" in literal:
            node = (literal.get("Expr") or literal.get("NotExpr") or {}).get("expr")
            kind = kind_of(node)
            inner = node[kind] if kind else {}
            if kind == "AssignExpr":
                e = Expr("eq", [self.expand(inner.get(side), out, index, withs) for side in ("lhs", "rhs")], index,
                         assign=inner.get("op") == "ColEq")
            elif kind in CALLS:
                e = Expr("call", [self.expand(term, out, index, withs) for term in operands(kind, inner)], index)
                e.inputs = len(e.terms)
                if kind == "Call" and e.terms:  # its last argument may be an output: asked when it matters
                    e.fcn = ref_name(inner.get("fcn")) or ""
                    e.inputs = len(e.terms) if e.fcn == "print" else None
            else:
                e = Expr("term", [self.expand(node, out, index, withs)], index)
            e.negated, e.withs = "NotExpr" in literal, withs
            e.text = " ".join(span_text(self.source, stmt.get("span")).split())
            out.append(e)

    def assigned(self, term: Any, out: list[Expr], index: int, withs: list[Any] | None = None,
                 always: bool = False) -> Any:
        """``term`` expanded, and assigned to a new variable first when it reads a reference or holds a
        comprehension (a ``with`` value, a head's or a comprehension's term), or ``always``."""
        term = self.expand(term, out, index, withs or [])
        if always or evaluates(term):
            var = self.var(term)
            out.append(Expr("eq", [var, term], index, withs=withs or []))
            return var
        return term

    def expand(self, term: Any, out: list[Expr], index: int, withs: list[Any]) -> Any:
        """``term`` with each call in it (outside comprehensions) made an expression of its own,
        appended to ``out``, and replaced by its output; a reference's composite base likewise."""
        kind = kind_of(term)
        if kind is None:
            return term
        inner = term[kind]
        if kind in CALLS:
            args = [self.expand(arg, out, index, withs) for arg in operands(kind, inner)]
            var = self.var(term)
            out.append(Expr("call", [*args, var], index, inputs=len(args), withs=withs))
            return var
        if kind in REFS:
            base, parts = unroll(term)
            new_base = self.expand(base, out, index, withs)
            new_parts = [part if isinstance(part, str) else self.expand(part, out, index, withs) for part in parts]
            if kind_of(new_base) in _COMPOSITE:
                var = self.var(new_base)
                out.append(Expr("eq", [var, new_base], index, withs=withs))
                new_base = var
            if new_base is base and all(new is old for new, old in zip(new_parts, parts)):
                return term
            for part in new_parts:
                new_base = ({"RefDot": {"refr": new_base, "field": [None, part]}} if isinstance(part, str)
                            else {"RefBrack": {"refr": new_base, "index": part}})
            return new_base
        if kind in ("Array", "Set"):
            items = inner.get("items") or []
            new = [self.expand(item, out, index, withs) for item in items]
            return term if all(a is b for a, b in zip(new, items)) else {kind: {"items": new}}
        if kind == "Object":
            fields = [entry for entry in inner.get("fields") or [] if len(entry) == 3]
            new = [[span, self.expand(key, out, index, withs), self.expand(value, out, index, withs)]
                   for span, key, value in fields]
            return term if all(a[1] is b[1] and a[2] is b[2] for a, b in zip(new, fields)) else {kind: {"fields": new}}
        return term


def outputs(e: Expr, safe: set[str], arity: Callable[[str], int | None], buffer: set[str]) -> set[str]:
    """The variables ``e`` binds once ``safe`` are bound (OPA's ``outputVarsForExpr``); ``arity``
    of a function by name (None: unknown, its last argument then counts as an output). ``buffer`` is
    OPA's ``output``, one set for a body's pass: a call leaves what it binds there, and an ``every``
    binds what the last call left, as in OPA (where an ``every`` then waits for a variable that call
    bound, and stays unsafe); what this returns may be ``buffer`` itself: use it before the next call."""
    if e.negated or any(not vars_of(value).issubset(safe) for value in e.withs):
        return set()
    if e.kind == "term":
        return ref_outputs(e.terms, safe)
    if e.kind == "every":
        buffer |= ref_outputs(e.terms, safe)
        return buffer
    buffer.clear()
    if e.fcn == "print":  # OPA reads each argument in a comprehension of its own: it binds nothing
        return buffer
    buffer |= ref_outputs(e.terms, safe)
    if e.kind == "eq":
        basis = safe | buffer
        buffer.clear()
        if e.assign:  # OPA leaves its left side out of what is bound, so no right side is bound through it
            basis -= {name(item) for item in all_vars(e.terms[0])}
        unifier = Unifier(basis)
        unifier.unify(e.terms[0], e.terms[1])
        return (basis | unifier.unified) - safe
    if e.inputs is None:
        found = arity(e.fcn)
        e.inputs = len(e.terms) - 1 if found is None else min(found, len(e.terms))
    if e.inputs >= len(e.terms):
        return buffer
    if vars_of(e.terms[: e.inputs], _NOT_INPUT) - buffer - safe:
        return set()
    buffer |= vars_of(e.terms[e.inputs :], _NOT_INPUT)
    return buffer


def ref_outputs(terms: list[Any], safe: set[str]) -> set[str]:
    """What the references in ``terms`` bind: of one whose base is bound, the variables in its
    brackets (not another reference's base), those of a comprehension there too (as OPA does: and
    one standing for those OPA makes in it)."""
    out: set[str] = set()
    for kind, item, _ in scan(terms, refs=True):
        if kind == "Ref":
            base, parts = unroll(item)
            if _ref_safe(base, safe):
                parts = [part for part in parts if not isinstance(part, str)]
                out.update(name(var) for var in all_vars(parts, ("base",)))
                closures = [compr for found, compr, _ in scan(parts) if found in CLOSURES]
                out.update(f"${id(compr)}" for compr in closures if _makes_vars(compr))
    return out


def _ref_safe(base: Any, safe: set[str]) -> bool:
    if kind_of(base) == "Var":
        return name(base["Var"]) in safe
    return vars_of(base).issubset(safe)


def closure_reads(kind: str, item: dict[str, Any]) -> dict[str, int]:
    """The variables of a comprehension or of an ``every``'s body (``item``, of ``kind``), each with a
    line: those of the body around it among them are those it reads from there (a variable it
    declares is its own, ``policies._locals``)."""
    parts = ("query",) if kind == "Every" else ("query", "term", "key", "value")
    inner = [item.get(part) for part in parts]
    reads: dict[str, int] = {}
    for var in all_vars(inner):
        reads.setdefault(name(var), (var.get("span") or {}).get("line", 0))
    return reads


def _makes_vars(item: dict[str, Any]) -> bool:
    """Whether OPA's rewriting makes variables of its own in a comprehension: one for each it
    declares, a call's value, a term it assigns first."""
    inner = [item.get(part) for part in ("query", "term", "key", "value")]
    if any("@" in name(var) for var in all_vars(inner)):
        return True
    rewriter, scratch = Rewriter(b""), []
    stmts = (item.get("query") or {}).get("stmts") or []
    for index, stmt in enumerate(stmts):
        rewriter.statement(stmt, index, scratch)
    for part in ("term", "key", "value"):
        if item.get(part) is not None:
            rewriter.assigned(item[part], scratch, len(stmts))
    return bool(rewriter.made) or any(_makes_vars(compr) for e in scratch for kind, compr in e.survey().closures
                                      if kind != "Every")


class Unifier:
    """The variables ``a = b`` binds, given those bound already (OPA's ``unify.go``)."""

    __slots__ = ("safe", "unified", "unknown")

    def __init__(self, safe: set[str]) -> None:
        self.safe, self.unified, self.unknown = safe, set(), {}

    def unify(self, a: Any, b: Any) -> None:
        ka, kb = kind_of(a), kind_of(b)
        if ka == "Var":
            var = name(a["Var"])
            if kb == "Var":
                other = name(b["Var"])
                if self._is_safe(other):
                    self._mark(var)
                elif self._is_safe(var):
                    self._mark(other)
                else:
                    self.unknown.setdefault(var, set()).add(other)
                    self.unknown.setdefault(other, set()).add(var)
            elif kb in ("Array", "Object"):
                self._unify_all(var, b)
            elif kb not in REFS or _ref_safe(unroll(b)[0], self.safe):
                self._mark(var)
        elif ka in REFS:
            if _ref_safe(unroll(a)[0], self.safe):
                self._bind(b, ("Var", "Array", "Object"))
        elif ka in CLOSURES:
            self._bind(b, {"ArrayCompr": ("Var", "Array"), "ObjectCompr": ("Var", "Object")}.get(ka, ("Var",)))
        elif ka in ("Array", "Object"):
            self._unify_collection(ka, a, b, kb)
        elif kb == "Var":
            self._mark(name(b["Var"]))

    def _bind(self, b: Any, kinds: tuple[str, ...]) -> None:
        """``b`` bound by a value on the other side, if it is one of ``kinds``."""
        kb = kind_of(b)
        if kb == "Var" and kb in kinds:
            self._mark(name(b["Var"]))
        elif kb in kinds:
            self._mark_all(b)

    def _unify_collection(self, ka: str, a: Any, b: Any, kb: str | None) -> None:
        if kb == "Var":
            self._unify_all(name(b["Var"]), a)
        elif (kb in CLOSURES and ka == "Array") or (kb in REFS and _ref_safe(unroll(b)[0], self.safe)):
            self._mark_all(a)
        elif kb == ka == "Array":
            items, others = a["Array"].get("items") or [], b["Array"].get("items") or []
            if len(items) == len(others):
                for x, y in zip(items, others):
                    self.unify(x, y)
        elif kb == ka == "Object":
            fields = [entry for entry in a["Object"].get("fields") or [] if len(entry) == 3]
            others = {_key(entry[1]): entry[2] for entry in b["Object"].get("fields") or [] if len(entry) == 3}
            if len(fields) != len(others):
                return
            if None in others or any(_key(entry[1]) is None for entry in fields):  # keys it cannot compare
                self._mark_all(a)
                self._mark_all(b)
                return
            for _, key, value in fields:
                if _key(key) in others:
                    self.unify(value, others[_key(key)])

    def _is_safe(self, var: str) -> bool:
        return var in self.safe or var in self.unified

    def _mark_all(self, term: Any) -> None:
        for var in vars_of(term, _NOT_UNIFIED):
            self._mark(var)

    def _unify_all(self, var: str, term: Any) -> None:
        if self._is_safe(var):
            self._mark_all(term)
            return
        unsafe = vars_of(term, _NOT_UNIFIED) - self.safe - self.unified
        if not unsafe:
            self._mark(var)
        for other in unsafe:
            self.unknown.setdefault(var, set()).add(other)

    def _mark(self, var: str) -> None:
        self.unified.add(var)
        for other in self.unknown.pop(var, ()):
            self._mark(other)
        for other, deps in list(self.unknown.items()):
            if var in deps:
                deps.discard(var)
                if not deps and other in self.unknown:
                    self._mark(other)


def operands(kind: str, inner: dict[str, Any]) -> list[Any]:
    """A call's arguments, of any of the terms OPA reads as calls."""
    if kind == "Call":
        return list(inner.get("params") or [])
    if kind == "Membership":
        return [term for term in (inner.get("key"), inner.get("value"), inner.get("collection")) if term]
    if kind == "UnaryExpr":
        return [inner.get("expr")]
    return [inner.get("lhs"), inner.get("rhs")]


def evaluates(term: Any) -> bool:
    """Whether OPA assigns ``term`` to a variable first: it reads a reference or holds a comprehension."""
    return any(kind == "Ref" or kind in CLOSURES for kind, _, _ in scan(term, refs=True))


def vars_of(nodes: Any, skip: tuple[str, ...] = ()) -> set[str]:
    """The variables of ``nodes`` outside comprehensions, but where ``skip`` (see ``scan``)."""
    return {name(item) for kind, item, where in scan(nodes) if kind == "Var" and where not in skip}


def name(var: dict[str, Any]) -> str:
    """The variable a name stands for (``policies._locals``: ``x@3`` for a declared one), each wildcard
    its own (``_#<offset>``), as OPA makes them."""
    value = var.get("local") or var.get("value", "")
    return f"_#{(var.get('span') or {}).get('start')}" if value == "_" else value


def kind_of(term: Any) -> str | None:
    """A term's kind (``"Var"``, ``"RefDot"``, ...), or None."""
    if type(term) is dict and len(term) == 1:
        kind = next(iter(term))
        return kind if type(term[kind]) is dict else None
    return None


def _key(term: Any) -> tuple[str, Any] | None:
    """An object's key as OPA matches it (a scalar or a variable), else None."""
    kind = kind_of(term)
    if kind in ("String", "RawString"):
        return ("s", term[kind].get("value"))
    if kind in ("Number", "Bool", "Null"):
        return (kind, term[kind].get("value"))
    return ("v", name(term["Var"])) if kind == "Var" else None
