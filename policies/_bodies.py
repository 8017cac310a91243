"""Variables in a rule's body that nothing binds, and declarations nothing uses, which OPA refuses
and regorus loads anyway.

OPA refuses a body where a variable is only declared (``some x; x == input.a``), or only compared
or read (``y == 1``, ``y in s``, ``f(y)``, ``not p[y]``, ``{k: 1} = input.m``) and never bound:
``rego_unsafe_var_error``. regorus's own check (``policies._bundle.check_variables``) takes ``some
x`` for a binding and leaves ``not`` alone, so it loaded such rules and evaluated them as
undefined: a deny rule that never fired (fail open). It runs ``some z`` alone as true, where OPA
refuses ``declared var z unused`` (``rego_compile_error``), as it does an ``every`` key or value its
body never uses. ``unsafe_bodies`` finds these in regorus's AST as OPA's compiler (v1.22,
``compile.go``: ``rewriteLocalVars``, ``checkSafetyRuleBodies``, ``reorderBodyForSafety``,
``checkUnusedDeclaredVars``) does, over the expressions ``policies._safety`` makes of a body:

- Each variable must be bound: around the body (``input``, ``data``, the package's rules and
  imports, a function's arguments; for a comprehension or ``every``, the body it is in, and an
  ``every``'s key and value) or by one of its expressions (``:=``, ``=``, ``some x in``, a
  reference's ``[x]``, a call's output; not ``==``, ``in``, a call's input, ``not``, ``some x``
  alone). The order is OPA's: passes over the expressions not yet safe until a pass makes none
  safe; one is safe once what it reads is bound, and only then binds (so a later binding counts,
  one by an expression never safe does not). A head's term that reads a reference is read at the
  end of the body (``p := input.a[y] if { y == 1 }`` binds ``y``).
- An expression with a comprehension or ``every`` that reads a variable of the body waits until
  the body binds it (``c := [x | true]; x == 1`` is unsafe); a variable the comprehension declares,
  or the body declares only after it, is not the body's.
- OPA's quirks are kept where they decide: an ``every`` reading what only a call after it binds
  stays unsafe (``policies._safety.outputs``); an expression with such a comprehension forgets
  its other unbound variables (``x := 1; y == [x | true]`` compiles); a statement equal to one
  made safe before it that reordering put at its place stays unsafe.
- ``some x`` needs ``x`` used in its body (or head, or comprehension's term) outside a
  comprehension declaring its own; an ``every``'s key and value, in its body. A name a body uses
  and then declares, or that ``some x in`` reads in what it iterates, OPA refuses too
  (``policies._locals``).

Most bodies are settled before any of this: one reading only what is bound around it, or whose
statements each read only what is bound around or before them and bind a new plain variable at
most, is safe in OPA's first pass. It errs towards loading where unsure: a function whose arity
cannot be found takes its last argument as an output, two statements count as equal only when
written alike, and ``print(x)`` counts as a call that binds nothing (OPA also refuses an ``x``
only a later statement binds: ``var x is undeclared``). Heads, ``else`` values and function
arguments are ``policies._heads``'s, and a variable only under ``not`` ``policies._negation``'s:
both run first, with their own messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Iterator

import regorus

from policies._ast import CLOSURES, all_vars, package_name, ref_name, scan, span_text, unroll, with_globals
from policies._locals import resolve
from policies._safety import Expr, Rewriter, closure_reads, name, outputs

_UNSAFE = "rego_unsafe_var_error"
_COMPILE = "rego_compile_error"
_ARITY = re.compile(r"expects (\d+) argument")
_READ_ONLY = "`==`, `!=`, `<`, `in`, a call's argument, `not` and `with` read a variable, they do not bind it"


@dataclass(slots=True)
class _Module:
    """One module being checked, and what was found in it."""

    file: str
    source: bytes
    named: frozenset[str]
    """Names bound in every body: input, data, the package's rules, the imports."""
    arity: Callable[[str], int | None]
    found: list[str] = field(default_factory=list)
    somes: set[str] = field(default_factory=set)
    """The locals ``some x`` alone declares in the body being checked (``policies._locals``)."""
    everies: dict[int, frozenset[str]] = field(default_factory=dict)
    """``id`` of an ``every`` -> the locals it declares."""
    rewriter: Rewriter = field(init=False)

    def __post_init__(self) -> None:
        self.rewriter = Rewriter(self.source)

    def report(self, line: int, code: str, message: str) -> None:
        text = f"{self.file}:{line}: {code}: {message}"
        if text not in self.found:
            self.found.append(text)


def unsafe_bodies(modules: list[dict[str, Any]]) -> Iterator[str]:
    """``file:line: code: message`` for each variable of a body (a rule's, a comprehension's, an
    ``every``'s) in ``modules`` (regorus's AST) that OPA calls unsafe, and each ``some`` or ``every``
    variable nothing uses. Marks the variables of the bodies it reads (``policies._locals``)."""
    arities = _Arities(modules)
    for module, named in with_globals(modules):
        ctx = _Module(module["source"]["file"], module["source"]["contents"].encode(), named | {"input", "data"},
                      arities.resolver(module))
        for rule in module["ast"].get("rules", []):
            if "Spec" in rule:
                _rule(ctx, rule["Spec"] or {})
        yield from ctx.found


def _rule(ctx: _Module, spec: dict[str, Any]) -> None:
    head = spec.get("head") or {}
    head = next((head[k] for k in ("Compr", "Set", "Func") if isinstance(head.get(k), dict)), None)
    if head is None:
        return
    args = frozenset(item["value"] for item in all_vars(head.get("args"))) if head.get("args") else frozenset()
    _, parts = unroll(head.get("refr"))
    terms = [part for part in parts if not isinstance(part, str)]
    terms += [head.get("key"), (head.get("assign") or {}).get("value")]
    bodies = spec.get("bodies") or [{}]
    outer = ctx.named | args
    if _settled([terms, bodies], outer) and not any(
            "SomeVars" in (stmt.get("literal") or {}) or "Every" in (stmt.get("literal") or {})
            for body in bodies for stmt in (body.get("query") or {}).get("stmts") or []):
        return  # most rules: nothing to bind, nothing declared
    for body in bodies:
        made = [(body.get("assign") or {}).get("value")] if body.get("is_else") else terms
        query = body.get("query") or {}
        if _in_order(query.get("stmts") or [], made, outer):
            continue  # most others: safe statement by statement, as written
        found = resolve(ctx.source, head.get("args") or [], query.get("stmts") or [], made)
        ctx.somes = found.somes  # (locals are numbered per body)
        ctx.everies.update(found.everies)
        for var, line in found.above:
            ctx.report(line, _COMPILE, f"var {var} referenced above: the body uses `{var}` before it declares it "
                       f"(declare it first, or give one of the two another name)")
        for var, line in found.before:
            ctx.report(line, _COMPILE, f"var {var} assigned before: `some ... in` binds `{var}` and reads it in "
                       f"what it iterates (give one of the two another name)")
        for unused in found.unused:
            how = ("`every` declares it and its body never uses it (write `_` in its place)" if unused.every else
                   f"`some {_shown(unused.local)}` declares it and nothing uses it (drop the declaration, or bind "
                   f"it: `some {_shown(unused.local)} in ...`)")
            ctx.report(unused.line, _COMPILE, f"declared var {_shown(unused.local)} unused: {how}")
        _scope(ctx, query, made, outer, False)


def _in_order(stmts: list[dict[str, Any]], made: list[Any], outer: frozenset[str]) -> bool:
    """Whether a body is safe statement by statement as written: each reads only what is bound around
    it or before it, and binds at most a plain variable new to it, by ``:=`` or ``some ... in``. OPA
    makes each safe in turn in its first pass then, so none of its quirks applies, and none of its
    locals shadows another."""
    bound = set(outer)
    for stmt in stmts:
        literal = stmt.get("literal") or {}
        some = literal.get("SomeIn")
        assign = ((literal.get("Expr") or {}).get("expr") or {}).get("AssignExpr") or {}
        if isinstance(some, dict):
            new, reads = [some.get("key"), some.get("value")], [some.get("collection")]
        elif assign.get("op") == "ColEq":
            new, reads = [assign.get("lhs")], [assign.get("rhs")]
        elif "Expr" in literal or "NotExpr" in literal:
            new, reads = [], [literal]
        else:  # ``some x``, ``every``
            return False
        names = [(term or {}).get("Var", {}).get("value") for term in new if term is not None]
        if None in names or "_" in names or bound.intersection(names):
            return False
        if not _settled([reads, stmt.get("with_mods")], bound):
            return False
        bound.update(names)
    return _settled(made, bound)


def _scope(ctx: _Module, query: dict[str, Any], made: list[Any], outer: frozenset[str], term: bool) -> None:
    """Check a body: its statements ``query``, its result ``made`` (a head's terms, or a comprehension's
    when ``term``), with ``outer`` bound around it."""
    stmts = query.get("stmts") or []
    # OPA's ``every`` binds what the call before it left (``outputs``): with one, every statement counts;
    # else one that reads only what is bound around binds nothing new, and needs nothing
    every = any("Every" in (stmt.get("literal") or {}) for stmt in stmts)
    exprs: list[Expr] = []
    for index, stmt in enumerate(stmts):
        if every or not _settled(stmt, outer):
            ctx.rewriter.statement(stmt, index, exprs)
    ends = [ctx.rewriter.expand(value, exprs, len(stmts), []) for value in made
            if value is not None and (term or every or not _settled(value, outer))]
    ends = [ctx.rewriter.assigned(value, exprs, len(stmts)) for value in ends]  # after all their calls, as OPA
    for e in exprs:
        e.survey()
    if not _check(ctx, exprs, outer, every) or not term:  # a head's own variables are policies._heads's
        return
    bound = outer.union(*(e.needs for e in exprs))
    for kind, item, _ in scan(ends):
        var = name(item) if kind == "Var" else "$"
        if not var.startswith("$") and var not in bound:
            ctx.report((item.get("span") or {}).get("line", 0), _UNSAFE, f"var {_shown(var)} is unsafe: a "
                       f"comprehension's term uses it and nothing binds it (bind it in the comprehension's body or "
                       f"the body around it)")


def _check(ctx: _Module, exprs: list[Expr], scope: frozenset[str], every: bool) -> bool:
    """Report what is unsafe in a body's expressions (OPA's ``reorderBodyForSafety``), then check the
    comprehensions and ``every`` bodies of those that are safe; whether all is. ``scope``: what is
    bound around the body; ``every``: whether it has an ``every`` (then OPA's output buffer counts)."""
    body_vars = set().union(*(e.needs for e in exprs))
    reads = [_reads(e) if e.closures else {} for e in exprs]
    shared = [read.keys() & body_vars - scope if read else set() for read in reads]
    safe = set(scope)
    unsafe: list[set[str] | None] = [e.needs.keys() - safe for e in exprs]
    order: list[int] = []
    buffer: set[str] = set()  # OPA's, see ``outputs``: it matters to an ``every`` only
    index = list(range(len(exprs)))  # as OPA: its place in the body, then in the safe ones
    while True:
        before = len(order)
        for i, e in enumerate(exprs):
            if unsafe[i] is None:  # safe already
                continue
            if e.text and any(index[j] == index[i] and exprs[j].text == e.text for j in order):
                continue  # OPA takes it for one already safe, an equal one now at its place: it stays unsafe
            # what it binds it reads: nothing new once all that is bound (but OPA's buffer, with an ``every``)
            binds = outputs(e, safe, ctx.arity, buffer) if shared[i] or every or not e.needs.keys() <= safe else set()
            if shared[i]:
                lacking = shared[i] - _binds(ctx, [exprs[j] for j in order], safe)
                if lacking and lacking == binds:  # OPA's "closure-self": left for a later pass
                    continue
                if lacking:
                    unsafe[i] = lacking
            unsafe[i] = unsafe[i] - binds - safe
            if not unsafe[i]:
                unsafe[i], index[i] = None, len(order)
                order.append(i)
                safe |= binds
        if len(order) == before:
            break
    _report(ctx, exprs, unsafe, reads, shared, safe)
    seen = set(scope)  # what a comprehension or ``every`` of the i-th safe expression sees bound around it
    for i in order:
        for kind, item in exprs[i].closures:
            _closure(ctx, kind, item, frozenset(seen))
        seen |= exprs[i].needs.keys()
    return all(lacks is None for lacks in unsafe)


def _report(ctx: _Module, exprs: list[Expr], unsafe: list[set[str] | None], reads: list[dict[str, int]],
            shared: list[set[str]], safe: set[str]) -> None:
    """Report the variables left unsafe, as OPA: not one a ``:=`` assigns beside another."""
    found: dict[str, int] = {}
    for i, lacks in enumerate(unsafe):
        for var in lacks or ():
            line = exprs[i].needs.get(var, reads[i].get(var, 0))
            if var not in found or line < found[var]:
                found[var] = line
    assigned = {name(item) for i, lacks in enumerate(unsafe) if lacks and exprs[i].assign
                for item in all_vars(exprs[i].terms[0])}
    if any(not var.startswith("$") and var not in assigned for var in found):
        found = {var: line for var, line in found.items() if var not in assigned}
    for var, line in sorted(found.items(), key=lambda item: item[1]):
        if var.startswith("$"):
            continue
        shown = _shown(var)
        if var in safe:  # bound, but where OPA no longer looks (``outputs``; a statement taken for another)
            ctx.report(line, _UNSAFE, f"var {shown} is unsafe: the body binds it, but not where OPA looks for it (an "
                       f"`every` reading it before the call that binds it, or a statement written twice): bind "
                       f"`{shown}` first, with `{shown} := ...`")
        elif any(var in shared[i] and var not in exprs[i].needs for i, lacks in enumerate(unsafe) if lacks):
            ctx.report(line, _UNSAFE, f"var {shown} is unsafe: a comprehension or `every` reads it from the body "
                       f"around it, which never binds it (bind it in that body, `{shown} := ...`, or give the "
                       f"comprehension's own variable another name)")
        else:
            ctx.report(line, _UNSAFE, _message(var, ctx.somes))
    if found and all(var.startswith("$") for var in found):  # only what OPA made: name the expression
        ctx.report(min(found.values()), _UNSAFE, "expression is unsafe: a value it reads is never bound (bind "
                   "the variables it reads first)")


def _binds(ctx: _Module, exprs: list[Expr], safe: set[str]) -> set[str]:
    """What ``exprs``, in order, bind beyond ``safe`` (OPA's ``outputVarsForBody``)."""
    bound, buffer = set(safe), set()
    for e in exprs:
        bound |= outputs(e, bound, ctx.arity, buffer)
    return bound - safe


def _closure(ctx: _Module, kind: str, item: dict[str, Any], outer: frozenset[str]) -> None:
    if kind == "Every":
        _scope(ctx, item.get("query") or {}, [], outer | ctx.everies.get(id(item), frozenset()), False)
    else:
        made = [item.get(part) for part in ("term", "key", "value") if item.get(part) is not None]
        _scope(ctx, item.get("query") or {}, made, outer, True)


def _settled(node: Any, scope: frozenset[str]) -> bool:
    """Whether ``node`` reads no variable but those of ``scope``, and holds no comprehension."""
    for kind, item, _ in scan(node):
        if kind == "Var" and (item.get("local") or item.get("value")) not in scope or kind in CLOSURES:
            return False  # (``_`` is never in scope)
    return True


def _reads(e: Expr) -> dict[str, int]:
    """The variables ``e``'s comprehensions and ``every`` bodies hold (and a line each)."""
    reads: dict[str, int] = {}
    for kind, item in e.closures:
        for var, line in closure_reads(kind, item).items():
            reads.setdefault(var, line)
    return reads


class _Arities:
    """The arity of the functions a module calls: the bundle's own, then regorus's builtins."""

    def __init__(self, modules: list[dict[str, Any]]) -> None:
        self.functions: dict[str, int] = {}
        for module in modules:
            for rule in module["ast"].get("rules", []):
                head = (((rule.get("Spec") or {}).get("head")) or {}).get("Func")
                if isinstance(head, dict):
                    path = f"data.{package_name(module)}.{ref_name(head.get('refr'))}"
                    self.functions[path] = len(head.get("args") or [])

    def resolver(self, module: dict[str, Any]) -> Callable[[str], int | None]:
        package = f"data.{package_name(module)}."
        source = module["source"]["contents"].encode()
        aliases = {}
        for imp in module["ast"].get("imports", []):
            path = ref_name(imp.get("refr")) or ""
            aliases[span_text(source, imp.get("as")) or path.rsplit(".", 1)[-1]] = path

        def arity(fcn: str) -> int | None:
            first, _, rest = fcn.partition(".")
            for path in (package + fcn, f"{aliases.get(first)}.{rest}".rstrip("."), fcn):
                if path in self.functions:
                    return self.functions[path]
            return None if first in aliases or first == "data" else _builtin_arity(fcn)

        return arity


@cache
def _builtin_arity(fcn: str) -> int | None:
    """How many arguments regorus's builtin ``fcn`` takes (None: not found)."""
    probe = regorus.Engine()
    probe.add_policy("probe.rego", f"package toolgate_probe\nimport rego.v1\np if {{ x := {fcn}(); x == x }}\n")
    try:
        probe.eval_rule_as_json("data.toolgate_probe.p")
    except Exception as exc:  # regorus raises RuntimeError: "`startswith` expects 2 arguments"
        found = _ARITY.search(str(exc))
        return int(found[1]) if found else None
    return 0


def _message(var: str, somes: set[str]) -> str:
    shown = _shown(var)
    if shown == "_":
        return ("var _ is unsafe: a wildcard stands where a value is read (a comparison, `in`, a call's argument), "
                "and nothing binds it (name the value and bind it, or drop it)")
    how = f"`some {shown}` only declares it; {_READ_ONLY}" if var in somes else _READ_ONLY
    return (f"var {shown} is unsafe: nothing in the body binds it ({how}; bind it with `{shown} := ...`, "
            f"`{shown} = ...`, `some {shown} in ...` or as a reference's key, `input.xs[{shown}]`)")


def _shown(var: str) -> str:
    """A variable as the source names it."""
    return "_" if var.startswith("_#") else var.split("@", 1)[0]
