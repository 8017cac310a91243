"""Variables that appear only under ``not``, which OPA refuses and regorus evaluates anyway.

OPA's safety rule: every variable in a negated expression must be bound by a positive one in
the same body (or an enclosing one, or a function's arguments); ``not deny[x]`` with nothing
binding ``x`` is ``rego_unsafe_var_error`` at compile time. regorus loads such a rule and
evaluates ``not deny[x]`` as false whatever ``deny`` holds, so a rule meant to fire when a set
is empty never fires: a deny meant for that case is silently off. ``unsafe_negations`` finds
these in regorus's AST.

It errs towards loading: a variable counts as bound if it appears anywhere positive in its
body or an enclosing one, even where OPA would still call it unsafe (regorus's own check,
``policies._bundle.check_variables``, covers positive expressions); only a variable that
appears nowhere but under ``not`` is refused, and the wildcard ``_`` under ``not`` always is (as
in OPA; regorus evaluates ``not p[_]`` as false too). Names of the package's rules, its
imports, ``input`` and ``data`` are not variables.
"""

from __future__ import annotations

from typing import Any, Iterator

from policies._ast import import_aliases, package_name, span_text

_COMPREHENSIONS = ("ArrayCompr", "SetCompr", "ObjectCompr")
_GLOBAL = {"input", "data"}
_WILDCARD = "_"

Found = list[tuple[str, int]]  # (variable, line)
Nested = list[tuple[dict[str, Any], frozenset[str]]]  # (query, variables bound around it)


def unsafe_negations(modules: list[dict[str, Any]]) -> Iterator[str]:
    """``file:line: message`` for each variable that appears only under ``not`` in its scope."""
    rules: dict[str, set[str]] = {}  # package -> the first names of its rules
    for module in modules:
        rules.setdefault(package_name(module), set()).update(_rule_names(module["ast"]))
    for module in modules:
        file, source = module["source"]["file"], module["source"]["contents"].encode()
        named = _GLOBAL | rules[package_name(module)] | import_aliases(module)
        for rule in module["ast"].get("rules", []):
            for name, line in _rule(rule, source, named):
                if name == _WILDCARD:
                    yield (f"{file}:{line}: var _ is unsafe: a wildcard under `not` (write a rule that holds "
                           f"when a value exists, such as `any_p if p[_]`, and negate that)")
                else:
                    yield (f"{file}:{line}: var {name} is unsafe: it appears only under `not` (bind it in a "
                           f"positive expression of the body)")


def _rule(rule: dict[str, Any], source: bytes, named: set[str]) -> Found:
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


def _query(query: dict[str, Any], outer: frozenset[str], source: bytes, named: set[str]) -> Found:
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


def _nested(nested: Nested, source: bytes, named: set[str]) -> Found:
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
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if "Var" in item and isinstance(item["Var"], dict):
                var = item["Var"]
                found.append((var.get("value", ""), (var.get("span") or {}).get("line", 0)))
                continue
            compr = next((item[kind] for kind in _COMPREHENSIONS if kind in item), None)
            if isinstance(compr, dict) and "query" in compr:
                nested.append((compr["query"], outer))
                # the term is in the comprehension's scope: a comprehension inside it may use any
                # variable of the comprehension's body
                body: Found = []
                _vars(compr["query"], body, [], outer)
                terms = {key: value for key, value in compr.items() if key != "query"}
                _vars(terms, [], nested, outer | frozenset(name for name, _ in body))
                continue
            call = item.get("Call")
            if isinstance(call, dict):
                stack.extend(call.get("params") or [])
                continue
            stack.extend(value for key, value in item.items() if key != "span")


def _rule_names(ast: dict[str, Any]) -> set[str]:
    names = set()
    for rule in ast.get("rules", []):
        head = rule["Default"] if "Default" in rule else next(iter(((rule.get("Spec") or {}).get("head") or {}).values()), {})
        ref = head.get("refr") if isinstance(head, dict) else None
        while isinstance(ref, dict) and "Var" not in ref:
            ref = next((ref[k]["refr"] for k in ("RefDot", "RefBrack") if k in ref), None)
        if isinstance(ref, dict):
            names.add(ref["Var"]["value"])
    return names
