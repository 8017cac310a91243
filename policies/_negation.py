"""Variables that appear only under ``not``, which OPA refuses and regorus evaluates anyway.

OPA's safety rule: every variable in a negated expression must be bound by a positive one in
the same body (or an enclosing one, or a function's arguments); ``not deny[x]`` with nothing
binding ``x`` is ``rego_unsafe_var_error`` at compile time. regorus loads such a rule and
evaluates ``not deny[x]`` as false whatever ``deny`` holds, so a rule meant to fire when a set
is empty never fires: a deny meant for that case is silently off. ``unsafe_negations`` finds
these in regorus's AST.

It looks no further than that, for a message of its own: a variable counts as bound here if it
appears anywhere positive in its body or an enclosing one (``y == 1; not p[y]`` too); only a
variable that appears nowhere but under ``not`` is refused, and the wildcard ``_`` under ``not``
always is (as in OPA; regorus evaluates ``not p[_]`` as false too). Names of the package's rules,
its imports, ``input`` and ``data`` are not variables. What binds a variable, under ``not`` or
not, is ``policies._bodies``'s, which runs after this and refuses the rest (``y == 1`` binds no
``y``).
"""

from __future__ import annotations

from typing import Any, Iterator

from policies._ast import CLOSURES, scan, span_text, with_globals

_WILDCARD = "_"

Found = list[tuple[str, int]]  # (variable, line)
Nested = list[tuple[dict[str, Any], frozenset[str]]]  # (query, variables bound around it)


def unsafe_negations(modules: list[dict[str, Any]]) -> Iterator[str]:
    """``file:line: message`` for each variable that appears only under ``not`` in its scope."""
    for module, named in with_globals(modules):
        file, source = module["source"]["file"], module["source"]["contents"].encode()
        for rule in module["ast"].get("rules", []):
            for name, line in _rule(rule, source, named):
                if name == _WILDCARD:
                    yield (f"{file}:{line}: var _ is unsafe: a wildcard under `not` (write a rule that holds "
                           f"when a value exists, such as `any_p if p[_]`, and negate that)")
                else:
                    yield (f"{file}:{line}: var {name} is unsafe: it appears only under `not` (bind it in a "
                           f"positive expression of the body)")


def _rule(rule: dict[str, Any], source: bytes, named: frozenset[str]) -> Found:
    if "Default" in rule:
        found: Found = []
        nested: Nested = []
        _vars(rule["Default"].get("value"), found, nested, frozenset())
        return _nested(nested, source, named)
    spec = rule.get("Spec") or {}
    head = spec.get("head") or {}
    args: Found = []
    for arg in (head.get("Func") or {}).get("args") or []:
        _vars(arg, args, [], frozenset())
    bound = frozenset(name for name, _ in args)
    bodies = [body["query"] for body in spec.get("bodies", []) if body.get("query")]
    everywhere = bound | frozenset().union(*(_positive(query, source) for query in bodies))
    head_nested: Nested = []
    _vars(head, [], head_nested, everywhere)  # comprehensions in the head see the body's variables
    for body in spec.get("bodies", []):
        _vars(body.get("assign"), [], head_nested, everywhere)
    unsafe = _nested(head_nested, source, named)
    for query in bodies:
        unsafe += _query(query, bound, source, named)
    return unsafe


def _query(query: dict[str, Any], outer: frozenset[str], source: bytes, named: frozenset[str]) -> Found:
    """The unsafe variables under ``not`` in ``query`` and in the queries nested in it."""
    bound = outer | _positive(query, source)
    unsafe: Found = []
    nested: Nested = []
    for stmt in query.get("stmts", []):
        literal = stmt.get("literal") or {}
        if "NotExpr" in literal:
            found: Found = []
            _vars(literal["NotExpr"].get("expr"), found, nested, bound)
            for mod in stmt.get("with_mods") or []:
                _vars(mod.get("as"), found, nested, bound)
            unsafe += [(name, line) for name, line in found
                       if name == _WILDCARD or (name not in bound and name not in named)]
        elif "Every" in literal:
            every = literal["Every"]
            _vars(every.get("domain"), [], nested, bound)
            own = frozenset(span_text(source, every.get(part)) for part in ("key", "value")) - {""}
            nested.append((every.get("query") or {}, bound | own))
        else:
            _vars(literal, [], nested, bound)
            for mod in stmt.get("with_mods") or []:
                _vars(mod, [], nested, bound)
    return unsafe + _nested(nested, source, named)


def _nested(nested: Nested, source: bytes, named: frozenset[str]) -> Found:
    unsafe: Found = []
    for query, outer in nested:
        unsafe += _query(query, outer, source, named)
    return unsafe


def _positive(query: dict[str, Any], source: bytes) -> frozenset[str]:
    """Every variable a statement of ``query`` that is not negated mentions (outside nested scopes)."""
    found: Found = []
    for stmt in query.get("stmts", []):
        literal = stmt.get("literal") or {}
        if "NotExpr" in literal or "SomeVars" in literal:  # ``some x`` declares, it does not bind
            continue
        if "Every" in literal:
            _vars(literal["Every"].get("domain"), found, [], frozenset())
            continue
        _vars(literal, found, [], frozenset())
        for mod in stmt.get("with_mods") or []:
            _vars(mod.get("as"), found, [], frozenset())
    return frozenset(name for name, _ in found)


def _vars(node: Any, found: Found, nested: Nested, outer: frozenset[str]) -> None:
    """Append the variables in ``node`` to ``found``; the comprehensions in it to ``nested``, with
    ``outer`` as what is bound around them. A call's function name is not a variable."""
    for kind, item, _ in scan(node):
        if kind == "Var":
            found.append((item.get("value", ""), (item.get("span") or {}).get("line", 0)))
        elif kind in CLOSURES and "query" in item:
            nested.append((item["query"], outer))
            # the term is in the comprehension's scope: a comprehension inside it may use any
            # variable of the comprehension's body
            body: Found = []
            _vars(item["query"], body, [], outer)
            terms = {key: value for key, value in item.items() if key != "query"}
            _vars(terms, [], nested, outer | frozenset(name for name, _ in body))
