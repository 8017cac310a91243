"""Variables OPA calls unsafe in what a rule produces, which regorus loads anyway: in a rule's head
(its key, value or path), an ``else``'s value, a function's value or arguments, a comprehension's
term, and a default's value.

OPA refuses these at compile time (``rego_unsafe_var_error``: ``p := x if { true }``, ``f(x) := y``,
``a := 1 if { false } else := y``, ``[x | true]``); regorus's own check
(``policies._bundle.check_variables``) looks at bodies only, so it loaded them and then failed every
evaluation reaching them (``policy_unavailable``), or answered what OPA never would (``f(input.a)``
matched ``input.a`` as a pattern, ``[x | some x]`` was ``[]``). ``unsafe_heads`` finds them in
regorus's AST as OPA's compiler does (``compile.go``: ``rewriteRefsInHead``,
``checkSafetyRuleHeads``, ``reorderComprehensionSafety``):

- A variable in a head, an ``else``'s value or a comprehension's term must be bound by the body
  it belongs to (its own body for an ``else``), by a function's arguments, or for a comprehension
  by the bodies around it; ``_`` there never is. Binding is OPA's: ``x := ...``, ``x = ...`` (in an
  array or an object's value, not a key or a set), ``some x in ...``, ``input.a[x]``, a call's
  output argument; not ``x == 1``, ``x in s``, ``not ...``, ``some x`` alone, nor anything inside
  a nested comprehension or ``every`` body. A term that reads a reference OPA moves into the body,
  so its own ``input.a[x]`` binds ``x`` (``o[k] := input.xs[k]``).
- A function's argument holds no reference but into another argument (``f(input.a)``, ``f(x.y)``:
  OPA takes the reference's first name for an argument nothing binds), and no call
  (``rego_compile_error``); a default's value no variable, reference or call outside a
  comprehension (``rego_parse_error``).

It errs towards loading: the last argument of any call standing as a statement counts as bound
(``print(x)`` too), a variable the body binds anywhere counts wherever OPA can order it, and a name
of the package's rules or imports is never a variable. A body's own unsafe variables are regorus's
check's, ``policies._negation``'s and ``policies._bodies``'s (which runs after this, with OPA's
own account of what binds: it refuses what this lets bind loosely, ``startswith(s, x)`` say).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from policies._ast import CLOSURES, pattern_vars, scan, span_text, unroll, with_globals

_WILDCARD = "_"
_UNSAFE = "rego_unsafe_var_error"
_PLAIN = ("", "key", "set")  # where an argument's variable is no reference's


@dataclass(slots=True)
class _Module:
    """One module being checked, and what was found in it."""

    file: str
    source: bytes
    named: frozenset[str]
    """Names that are no variables here: input, data, the package's rules, the imports."""
    found: list[str] = field(default_factory=list)

    def report(self, line: int, code: str, message: str) -> None:
        text = f"{self.file}:{line}: {code}: {message}"
        if text not in self.found:
            self.found.append(text)


def unsafe_heads(modules: list[dict[str, Any]]) -> Iterator[str]:
    """``file:line: code: message`` for each unsafe variable in what a rule of ``modules`` (regorus's
    AST, from ``get_ast_as_json``) produces, and each argument or default OPA refuses."""
    for module, named in with_globals(modules):
        ctx = _Module(module["source"]["file"], module["source"]["contents"].encode(), named)
        for rule in module["ast"].get("rules", []):
            if "Default" in rule:
                _default(ctx, rule["Default"])
            else:
                _rule(ctx, (rule.get("Spec") or {}))
        yield from ctx.found


def _rule(ctx: _Module, spec: dict[str, Any]) -> None:
    head = spec.get("head") or {}
    kind = next((k for k in ("Compr", "Set", "Func") if isinstance(head.get(k), dict)), None)
    if kind is None:
        return
    head = head[kind]
    name = _name(ctx, head.get("refr"))
    args = head.get("args") or []
    arg_vars = _args(ctx, args, name)
    _, parts = unroll(head.get("refr"))
    terms = [part for part in parts if not isinstance(part, str)]
    terms += [head.get("key"), (head.get("assign") or {}).get("value")]
    or_arg = " or take it as an argument" if kind == "Func" else ""
    closures = [item for what, item, _ in scan(args) if what in CLOSURES]
    for body in spec.get("bodies") or [{}]:
        read = _read(body.get("query"))
        if body.get("is_else"):
            made = [(body.get("assign") or {}).get("value")]
            what, hint = f"the `else` value of {name}", f"in that `else`'s body{or_arg}"
        else:
            made = terms
            what, hint = f"the {'value' if kind == 'Func' else 'head'} of {name}", f"in the body{or_arg}"
        # OPA moves a term that reads a reference into the body, where its ``[x]`` binds ``x``
        bound = arg_vars | read.bound | _indexed(made)
        _terms(ctx, made, bound, what, hint)
        for compr in closures:  # and an argument that is a comprehension, into each body
            _closure(ctx, compr, bound)
        _walk(ctx, read, bound)


def _args(ctx: _Module, args: list[Any], name: str) -> frozenset[str]:
    """The variables a function's arguments bind; reports a call in them, and a reference into
    anything but another argument."""
    found = list(scan(args))
    plain = frozenset(item["value"] for kind, item, where in found if kind == "Var" and where in _PLAIN)
    for kind, item, where in found:
        line = _line(item)
        if kind == "Call":
            ctx.report(line, "rego_compile_error", f"rule arguments cannot contain calls: an argument of {name} "
                       f"calls a function (take the value as an argument and compute in the body)")
        elif kind == "Var" and where == "base" and item["value"] not in plain:
            var = item["value"]
            ctx.report(line, _UNSAFE, f"var {var} is unsafe: an argument of {name} is a reference into {var}, "
                       f"which no other argument binds (take a plain argument, `{name}(v)`, and compare it in "
                       f"the body: `v == {var}...`)")
    return frozenset(item["value"] for kind, item, _ in found if kind == "Var") - {_WILDCARD}


def _default(ctx: _Module, default: dict[str, Any]) -> None:
    args = frozenset(item["value"] for kind, item, _ in scan(default.get("args")) if kind == "Var")
    for kind, item, where in scan(default.get("value")):
        if kind in CLOSURES:
            _closure(ctx, item, args)
            continue
        what = "call" if kind == "Call" else "ref" if where == "base" else "var"
        ctx.report(_line(item), "rego_parse_error", f"illegal default rule (value cannot contain {what}): a "
                   f"default's value is a constant (compute the value in a rule of its own)")
        return


def _terms(ctx: _Module, terms: list[Any], bound: frozenset[str], what: str, hint: str) -> None:
    """Report each variable of ``terms`` that ``bound`` lacks (``what`` uses it: bind it ``hint``);
    check the comprehensions in them."""
    for kind, item, where in scan(terms):
        if kind in CLOSURES:
            _closure(ctx, item, bound)
        elif kind == "Var" and where != "index":
            name = item.get("value", "")
            if name == _WILDCARD:
                ctx.report(_line(item), _UNSAFE, f"var _ is unsafe: {what} is a wildcard, which nothing binds "
                           f"(name the value and bind it {hint})")
            elif name not in bound and name not in ctx.named:
                ctx.report(_line(item), _UNSAFE, f"var {name} is unsafe: {what} uses it and nothing binds it "
                           f"(bind it {hint}: `{name} := ...`, `some {name} in ...`)")


def _closure(ctx: _Module, compr: dict[str, Any], outer: frozenset[str]) -> None:
    read = _read(compr.get("query"))
    terms = [compr.get(key) for key in ("term", "key", "value")]
    inner = outer | read.bound | _indexed(terms)
    _terms(ctx, terms, inner, "a comprehension's term", "in the comprehension's body or the body around it")
    _walk(ctx, read, inner)


def _walk(ctx: _Module, body: _Body, scope: frozenset[str]) -> None:
    """Check the comprehensions of a body (``scope``: what is bound in it), and its ``every`` bodies."""
    for compr in body.closures:
        _closure(ctx, compr, scope)
    for every in body.everies:
        own = frozenset(span_text(ctx.source, every.get(part)) for part in ("key", "value")) - {""}
        inner = _read(every.get("query"))
        _walk(ctx, inner, scope | own | inner.bound)


@dataclass(frozen=True, slots=True)
class _Body:
    """What the checks need of a body (its statements outside comprehensions and ``every`` bodies)."""

    bound: frozenset[str]
    """The variables it may bind: by ``:=`` and ``=``, ``some ... in``, a reference's ``[index]``,
    or a call's last (output) argument; not under ``not``."""
    closures: list[dict[str, Any]]
    """Its comprehensions."""
    everies: list[dict[str, Any]]
    """Its ``every`` statements."""


def _read(query: Any) -> _Body:
    bound: set[str] = set()
    closures: list[dict[str, Any]] = []
    everies: list[dict[str, Any]] = []
    for stmt in (query or {}).get("stmts", []):
        literal = stmt.get("literal") or {}
        every = literal.get("Every")
        if isinstance(every, dict):
            everies.append(every)
        positive = "NotExpr" not in literal and "SomeVars" not in literal
        nodes = every.get("domain") if isinstance(every, dict) else [literal, stmt.get("with_mods")]
        for kind, item, where in scan(nodes):
            if kind in CLOSURES:
                closures.append(item)
            elif positive and kind == "Var" and where == "index":
                bound.add(item["value"])
        if positive:
            bound.update(_patterns(literal))
    return _Body(frozenset(bound - {_WILDCARD}), closures, everies)


def _patterns(literal: dict[str, Any]) -> Iterator[str]:
    """The variables a statement binds by a pattern: ``some ... in``, ``:=``, ``=``, an output argument."""
    some = literal.get("SomeIn")
    if isinstance(some, dict):
        yield from pattern_vars([some.get("key"), some.get("value")])
    expr = (literal.get("Expr") or {}).get("expr") or {}
    if isinstance(expr.get("AssignExpr"), dict):
        yield from pattern_vars([expr["AssignExpr"].get("lhs"), expr["AssignExpr"].get("rhs")])
    elif isinstance(expr.get("Call"), dict):
        yield from pattern_vars((expr["Call"].get("params") or [])[-1:])


def _indexed(terms: list[Any]) -> frozenset[str]:
    """The variables in the ``[index]`` of a reference in ``terms`` (outside comprehensions)."""
    return frozenset(item["value"] for kind, item, where in scan(terms) if kind == "Var" and where == "index")


def _name(ctx: _Module, ref: Any) -> str:
    """A rule's name as the source spells it: ``f``, ``a.b``, ``o[k]``."""
    base, parts = unroll(ref)
    name = (base.get("Var") or {}).get("value", "") if isinstance(base, dict) else ""
    for part in parts:
        name += f".{part}" if isinstance(part, str) else f"[{span_text(ctx.source, _span(part))}]"
    return name


def _line(node: dict[str, Any]) -> int:
    return (node.get("span") or {}).get("line", 0)


def _span(term: Any) -> dict[str, Any]:
    """The position of a term (``{"Var": {"span": ...}}``), or ``{}``."""
    inner = next(iter(term.values()), None) if isinstance(term, dict) else None
    span = inner.get("span") if isinstance(inner, dict) else None
    return span if isinstance(span, dict) else {}
