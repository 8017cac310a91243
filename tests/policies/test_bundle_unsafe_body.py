"""A rule body with a variable nothing binds, or a ``some``/``every`` variable nothing uses, does not
load (``policies._bodies``), checked against the pinned OPA's ``opa check`` and, for the look-alikes
that load, its decisions (``opa eval``).

regorus's own check (``check_variables``) took ``some x`` for a binding and let ``not`` be, so a
variable only declared, compared or read under ``not`` loaded, and regorus evaluated its rule as
undefined: a deny rule that never fired, and the call was allowed (fail open).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
from pathlib import Path

import pytest
import regorus

from gateway.cli import policy_cmd
from policies import EmbeddedEngine, PolicyError
from policies._bodies import unsafe_bodies
from policies._bundle import compile_bundle, read_bundle
from policies._errors import PolicyLoadError

from bundle_files import RULES_HEADER, opa_check, opa_decides, opa_errors, rules_bundle, rules_text, write_bundle

H = RULES_HEADER
INPUT = {"xs": [10, 20], "m": {"a": 1}, "n": 3, "s": "abc"}
UNSAFE = "rego_unsafe_var_error: var {} is unsafe"
UNUSED = "rego_compile_error: declared var {} unused"

# The reported policy: both deny rules were undefined whatever the input, so it allowed everything.
FAIL_OPEN = H + """visible := true
deny contains "blocked" if { some x; x == input.args.a }
deny contains "also" if { y == 1; not input.m[y] }
decision := {"decision": "deny", "reasons": [r | some r in deny]} if count(deny) > 0
else := {"decision": "allow", "reasons": []}
"""

# name -> (rules, what the refusal says): shapes regorus's own check and the other checks let load
REFUSED = {
    # only declared, then read
    "declared, then compared": ("ok if { some x; x == input.n }\n", UNSAFE.format("x")),
    "declared, then compared unequal": ("ok if { some x; x != 1 }\n", UNSAFE.format("x")),
    "declared, then ordered": ("ok if { some x; x < input.n }\n", UNSAFE.format("x")),
    "declared, then tested with in": ("ok if { some x; x in input.xs }\n", UNSAFE.format("x")),
    "declared, then a call's argument": ('ok if { some x; startswith(input.s, x) }\n', UNSAFE.format("x")),
    "declared, then a with value": ("ok if { some z; input.n with input as z }\n", UNSAFE.format("z")),
    "declared, then compared in a comprehension": ("ok if { some x; c := [1 | x == 2]; count(c) > 0 }\n",
                                                  UNSAFE.format("x")),
    "declared, then printed": ("ok if { some x; print(x) }\n", UNSAFE.format("x")),
    # compared or read, never bound
    "compared, then read under not": ("ok if { y == 1; not input.m[y] }\n", UNSAFE.format("y")),
    "declared, compared, read in a comprehension": ("ok if { some x; c := [1 | x == 1]; x == 2; count(c) > 0 }\n",
                                                     UNSAFE.format("x")),
    "assigned from an unbound variable": ("ok if { x := y }\n", UNSAFE.format("y")),
    "an object's key in a pattern": ("ok if { {k: 1} = input.m }\n", UNSAFE.format("k")),
    "a reference's key bound by an expression needing it first": ("ok if { y + 1 == input.xs[y]; x := 1; x > 0 }\n",
                                                                  UNSAFE.format("y")),
    "read in every, bound by a call after it": ("ok if { every v in input.xs { v > x }; count(input.xs, x) }\n",
                                                UNSAFE.format("x")),
    "a function's body": ("f(a) if { some b; b == a }\nok if f(1)\n", UNSAFE.format("b")),
    "an else body": ("ok := 1 if { input.no } else := 2 if { some x; x == 1 }\n", UNSAFE.format("x")),
    "a comprehension's body": ("c := [v | some v in input.xs; some w; w == v]\n", UNSAFE.format("w")),
    "an every body": ("ok if { every v in input.xs { some w; w == v } }\n", UNSAFE.format("w")),
    # declared, never used
    "some alone": ("ok if { some z }\n", UNUSED.format("z")),
    "some beside a binding": ("ok if { some z; x := input.n; x > 1 }\n", UNUSED.format("z")),
    "some, its name a comprehension's own": ("ok if { some y; c := [y | some y in input.xs]; count(c) > 0 }\n",
                                            UNUSED.format("y")),
    "every's key unused": ("ok if { every k, v in input.m { v } }\n", UNUSED.format("k")),
    "every's value unused": ("ok if { every k, v in input.m { k } }\n", UNUSED.format("v")),
    # declared where OPA does not have it
    "declared after its use": ("ok if { walk(input, [y, x]); some x }\n",
                               "rego_compile_error: var x referenced above"),
    "some in, its variable in what it iterates": ("ok if { some x in input.xs[x] }\n",
                                                  "rego_compile_error: var x assigned before"),
}
# name -> (rules defining ``out``, the value ``out`` has for INPUT, in Rego)
LOADED = {
    "declared, then bound by a reference": ("out := x if { some x; input.m[x] }\n", '"a"'),
    "declared, then bound by =": ("out := x if { some x; x = input.n }\n", "3"),
    "bound by unification with a constant": ("out := x if { x = 1 }\n", "1"),
    "bound by a later statement": ("out := y if { y > 1; y = input.n }\n", "3"),
    "compared, bound by a pattern": ('out := v if { v == 1; {"a": v} = input.m }\n', "1"),
    "a reference's key": ("out := i if { input.xs[i] == 20 }\n", "1"),
    "a wildcard's reference": ("out := n if { input.xs[_] == n; n = 20 }\n", "20"),
    "some in": ("out := z if { some z in input.xs; z > 15 }\n", "20"),
    "some key and value": ("out := k if { some k, v in input.m; v == 1 }\n", '"a"'),
    "a call's output": ("out := n + 1 if { count(input.xs, n) }\n", "3"),
    "a call's output pattern": ("out := [x, y] if { walk(input.m, [[x], y]) }\n", '["a", 1]'),
    "read under not, bound before": ("out := x if { x = input.n; not input.m[x] }\n", "3"),
    "a comprehension reading a bound variable": ("out := c if { x := 15; c := [y | some y in input.xs; y > x] }\n",
                                                "[20]"),
    "a comprehension's own variable": ("out := c if { c := [y | some y in input.xs]; y := 1; y > 0 }\n", "[10, 20]"),
    "every's key and value": ("out if { every k, v in input.m { k; v } }\n", "true"),
    "every reading a variable bound before": ("out if { x := 5; every v in input.xs { v > x } }\n", "true"),
    "some, used in the head": ("out := x if { some x; input.m[x] == 1 }\n", '"a"'),
    "a with value bound": ("q := input.n\nout := v if { z := {\"n\": 7}; v := q with input as z }\n", "7"),
    "a declared variable printed once bound": ("out := x if { x := 1; print(x) }\n", "1"),
    "an every body's own binding": ("out if { every v in input.xs { some w in input.xs; w >= v - 10 } }\n", "true"),
}

# OPA compiles these and decides as given; regorus fails them at run time, which denies
# (policy_unavailable): loaded, as OPA would, not refused
REGORUS_FAILS = {
    "every reading a variable bound by = after": ("out if { every v in input.xs { v > x }; x = 5 }\n", "true"),
    "a head's reference binds the body's variable": ("out := input.xs[i] if { i == 1 }\n", "20"),
}




def test_the_reported_fail_open_does_not_load(tmp_path):
    bundle = write_bundle(tmp_path, {"p.rego": FAIL_OPEN})
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(bundle)
    assert str(err.value).startswith(f"{bundle / 'p.rego'}:4: rego_unsafe_var_error: var x is unsafe: nothing in "
                                     f"the body binds it (`some x` only declares it;")


def test_the_reported_policy_allowed_everything_before():
    """Why this matters: regorus evaluates both deny rules as undefined, so the decision is allow."""
    engine = regorus.Engine()
    engine.add_policy("p.rego", FAIL_OPEN)
    engine.set_input_json(json.dumps({"args": {"a": 1}, "m": {}}))
    assert json.loads(engine.eval_rule_as_json("data.toolgate.deny")) == []
    assert json.loads(engine.eval_rule_as_json("data.toolgate.decision"))["decision"] == "allow"


@pytest.mark.opa
def test_opa_refuses_the_reported_policy(opa_binary, tmp_path):
    checked = opa_check(opa_binary, write_bundle(tmp_path, {"p.rego": FAIL_OPEN}))
    out = checked.stdout + checked.stderr
    assert checked.returncode != 0
    assert "p.rego:4: rego_unsafe_var_error: var x is unsafe" in out
    assert "p.rego:5: rego_unsafe_var_error: var y is unsafe" in out


@pytest.mark.parametrize("name", REFUSED)
def test_an_unbound_body_variable_does_not_load(tmp_path, name):
    rules, says = REFUSED[name]
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(rules_bundle(tmp_path, rules))
    assert re.search(r"p\.rego:\d+: ", str(err.value)), str(err.value)  # where, for the policy's author
    assert says in str(err.value)


@pytest.mark.parametrize("name", LOADED)
def test_a_look_alike_loads_and_decides(tmp_path, name):
    engine = EmbeddedEngine.from_bundle(rules_bundle(tmp_path, *LOADED[name]))
    assert engine.evaluate_sync(INPUT).decision == "allow"


@pytest.mark.parametrize("name", REGORUS_FAILS)
def test_what_opa_compiles_loads_even_where_regorus_then_fails(tmp_path, name):
    engine = EmbeddedEngine.from_bundle(rules_bundle(tmp_path, *REGORUS_FAILS[name]))
    with pytest.raises(PolicyError) as err:
        engine.evaluate_sync(INPUT)
    assert err.value.code == "policy_unavailable"


def test_the_message_says_why_and_how(tmp_path):
    bundle = rules_bundle(tmp_path, "ok if {\n  input.n == 3\n  y == 1\n  not input.m[y]\n}\n")
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(bundle)
    assert str(err.value) == (
        f"{bundle / 'p.rego'}:5: rego_unsafe_var_error: var y is unsafe: nothing in the body binds it (`==`, `!=`, "
        "`<`, `in`, a call's argument, `not` and `with` read a variable, they do not bind it; bind it with `y := "
        "...`, `y = ...`, `some y in ...` or as a reference's key, `input.xs[y]`)")


def test_policy_check_reports_the_variable(tmp_path):
    parser = argparse.ArgumentParser(prog="toolgate")
    policy_cmd.add_parser(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["policy", "check", str(write_bundle(tmp_path, {"p.rego": FAIL_OPEN}))])
    out = io.StringIO()
    assert ns.func(ns, out=out, err=out) == 2
    assert "p.rego:4: rego_unsafe_var_error: var x is unsafe" in out.getvalue()


@pytest.mark.asyncio
async def test_a_reload_to_such_a_bundle_keeps_the_old_policy(tmp_path):
    bundle = rules_bundle(tmp_path, *LOADED["declared, then bound by a reference"])
    engine = EmbeddedEngine.from_bundle(bundle)
    version = engine.version
    (bundle / "p.rego").write_text(rules_text(REFUSED["declared, then compared"][0]))
    with pytest.raises(PolicyLoadError, match="rego_unsafe_var_error"):
        await engine.reload()
    assert engine.version == version
    assert (await engine.evaluate(INPUT)).decision == "allow"


@pytest.mark.opa
@pytest.mark.parametrize("name", REFUSED)
def test_opa_refuses_the_same(opa_binary, tmp_path, name):
    rules, says = REFUSED[name]
    checked = opa_check(opa_binary, rules_bundle(tmp_path, rules))
    out = checked.stdout + checked.stderr
    assert checked.returncode != 0, out
    assert says in out or (name == "declared, then printed" and "var x is undeclared" in out), out


@pytest.mark.opa
@pytest.mark.parametrize("name", [*LOADED, *REGORUS_FAILS])
def test_opa_loads_the_look_alikes(opa_binary, tmp_path, name):
    checked = opa_check(opa_binary, rules_bundle(tmp_path, *{**LOADED, **REGORUS_FAILS}[name]))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.opa
@pytest.mark.parametrize("name", [*LOADED, *REGORUS_FAILS])
def test_opa_decides_the_look_alikes_as_written(opa_binary, tmp_path, name):
    bundle = rules_bundle(tmp_path / "b", *{**LOADED, **REGORUS_FAILS}[name])
    (tmp_path / "input.json").write_text(json.dumps(INPUT))
    assert opa_decides(opa_binary, bundle, tmp_path / "input.json") == "allow"


# Generated bodies over a few variables: declarations, comparisons, unifications (of patterns too),
# references with variable keys, ``in``, calls with and without outputs, ``not``, ``with``, and
# comprehensions and ``every`` nested in them, in any order. A body holds no statement twice (OPA
# then takes the second for the first; this check only when they are written alike).
VARS = ["x", "y", "z"]


def _term(rng: random.Random, depth: int = 0) -> str:
    v = rng.choice([*VARS, "_"] if rng.random() < 0.1 else VARS)
    shapes = [v, "1", f"[{v}, 1]", f'{{"k": {v}}}', f"input.xs[{v}]", f"{rng.choice(VARS)}.k", f"count([{v}])"]
    if depth == 0:
        shapes += [f"[{_term(rng, 1)} | some {rng.choice(VARS)} in input.xs]", f"input.m[{_term(rng, 1)}]"]
    return rng.choice(shapes)


def _binding(rng: random.Random, v: str) -> str:
    return rng.choice([f"{v} := {_term(rng)}", f"{v} = input.n", f"some {v} in input.xs", f"input.m[{v}]",
                       f"[{v}, _] = input.xs", f'{{"a": {v}}} = input.m', f"walk(input, [_, {v}])",
                       f"count(input.xs, {v})", f"{v} = {_term(rng)}", f"{_term(rng)} = {v}",
                       f"some _, {v} in input.m"])


def _use(rng: random.Random, v: str, depth: int) -> str:
    shapes = [f"{v} == 1", f"{v} != {_term(rng)}", f"{v} in input.xs", f"not input.m[{v}]", f'startswith({v}, "a")',
              f"{_term(rng)} == {_term(rng)}", f"not {_term(rng)} == 1", f"input.n with input as {_term(rng)}",
              f"{v} > count({_term(rng)})", f"some {v}", f"{{{v}: 1}} = input.m", f"{v} + 1 == input.xs[{v}]"]
    if depth < 2:
        inner = _body(rng, depth + 1)
        shapes += [f"c{depth} := [{_term(rng)} | {inner}]", f"count({{{rng.choice(VARS)} | {inner}}}) >= 0",
                   f"every e{depth} in input.xs {{ e{depth}; {inner} }}",
                   f"every k{depth}, e{depth} in input.m {{ k{depth}; e{depth}; {inner} }}"]
    return rng.choice(shapes)


def _body(rng: random.Random, depth: int = 0) -> str:
    stmts: list[str] = []
    for _ in range(rng.randint(1, 3)):
        v = rng.choice(VARS)
        stmt = _binding(rng, v) if rng.random() < 0.5 else _use(rng, v, depth)
        if stmt not in stmts:
            stmts.append(stmt)
    rng.shuffle(stmts)
    return "; ".join(stmts)


def _rule(rng: random.Random) -> str:
    body = _body(rng)
    return rng.choice([f"p := {_term(rng)} if {{ {body} }}", f"s contains {_term(rng)} if {{ {body} }}",
                       f"f(a) := a if {{ {body} }}", f"p := 1 if {{ input.q }} else := 2 if {{ {body} }}",
                       f"ok if {{ {body} }}", f"ok if {{ {body} }}"])


@pytest.mark.opa
@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_generated_bodies_against_opa(opa_binary, tmp_path, seed):
    """Never a refusal here that OPA does not make, and every body OPA refuses as unsafe, or for a
    variable declared and not used, does not load."""
    rng = random.Random(seed)
    texts = {f"c{i}.rego": f"package c{i}\nimport rego.v1\n{_rule(rng)}\n" for i in range(250)}
    write_bundle(tmp_path / "all", texts)
    opa_refuses = opa_errors(opa_binary, tmp_path / "all")
    ours_only = 0
    for name, text in texts.items():
        rule = text.splitlines()[-1]
        engine = regorus.Engine()
        try:
            engine.add_policy(name, text)
        except RuntimeError:  # a shape regorus cannot parse: refused, and no part of this check
            continue
        ours = list(unsafe_bodies(json.loads(engine.get_ast_as_json())))
        assert not ours or name in opa_refuses, f"refused what OPA compiles: {rule}: {ours}"
        covered = all(code == "rego_unsafe_var_error" or "unused" in message
                      for code, message in opa_refuses.get(name, [("", "")]))
        if not covered:  # OPA compiles it, or refuses it for another reason (a type error, ...)
            continue
        path = write_bundle(tmp_path / name[:-5], {"p.rego": text}) / "p.rego"
        with pytest.raises(PolicyLoadError) as err:
            compile_bundle(read_bundle(path))
        ours_only += any(str(err.value).endswith(problem.split(": ", 1)[1]) for problem in ours)
    assert ours_only > 15  # this check's, not regorus's own: refused here only because of it
