"""A variable nothing binds in a rule's head, an ``else``'s value, a function's value or arguments, a
comprehension's term or a default's value does not load (``policies._heads``), checked against the
pinned OPA's ``opa check`` and, for the look-alikes that load, its decisions (``opa eval``).

regorus loaded these and failed every evaluation reaching them (``policy_unavailable``), or answered
what OPA never would (``f(input.a) := 1`` matched ``input.a`` as a pattern; ``[x | some x]`` was
``[]``); its own check (``check_variables``) looks at bodies only.
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
from policies._bundle import compile_bundle, read_bundle
from policies._errors import PolicyLoadError
from policies._heads import unsafe_heads

from bundle_files import RULES_HEADER, opa_check, opa_decides, opa_errors, rules_bundle, rules_text, write_bundle

H = RULES_HEADER
INPUT = {"xs": [10, 20], "m": {"a": 1}, "n": 3}
UNSAFE = "rego_unsafe_var_error: var {} is unsafe"
CALLS = "rego_compile_error: rule arguments cannot contain calls"
DEFAULT = "rego_parse_error: illegal default rule (value cannot contain {})"

# name -> (rules, what the refusal says)
REFUSED = {
    # a function's value and arguments
    "a function's value nothing binds": ("f(x) := y if { x > 1 }\n", UNSAFE.format("y")),
    "a function's value with no body": ("f(x) := y\n", UNSAFE.format("y")),
    "a function's value a wildcard": ("f(x) := _\n", UNSAFE.format("_")),
    "a function's value only compared": ("f(x) := y if { y == x }\n", UNSAFE.format("y")),
    "a function's value bound only in a comprehension": ("f(x) := y if { count([y | some y in x]) > 0 }\n",
                                                         UNSAFE.format("y")),
    "a function's comprehension over nothing bound": ("f(x) := [y | some z in x]\n", UNSAFE.format("y")),
    "an argument reading input": ("f(input.a) := 1\n", UNSAFE.format("input")),
    "an argument reading a rule": ('q := {"r": 1}\nf(q.r) := 1\n', UNSAFE.format("q")),
    "two arguments reading one name": ("f(x.a, x.b) := 1\n", UNSAFE.format("x")),
    "an argument calling a function": ("f(count(x)) := 1\n", CALLS),
    "an argument comprehension's term": ("f([x | true]) := 1\n", UNSAFE.format("x")),
    # else
    "an else value nothing binds": ("a := 1 if { input.x } else := y\n", UNSAFE.format("y")),
    "an else value bound by the first body only": ("a := x if { x := input.x } else := x\n", UNSAFE.format("x")),
    "a function's else value": ("f(x) := 1 if { x } else := y\n", UNSAFE.format("y")),
    "a second else value": ("a := 1 if { input.x } else := z if { z := 2 } else := z\n", UNSAFE.format("z")),
    "an else value's comprehension": ("f(x) := 1 if { x } else := [y | some z in x]\n", UNSAFE.format("y")),
    # a rule's head
    "a rule's value nothing binds": ("p := x if { input.x }\n", UNSAFE.format("x")),
    "a rule's value only compared": ("p := x if { x == input.n }\n", UNSAFE.format("x")),
    "a rule's value only declared": ("p := x if { some x }\n", UNSAFE.format("x")),
    "a rule's value bound only inside every": ("p := x if { every x in input.xs { x } }\n", UNSAFE.format("x")),
    "a rule's value reading an unbound name": ("p := x.y if { input.x }\n", UNSAFE.format("x")),
    "a rule's value beside a reference": ("p := [x, input.a]\n", UNSAFE.format("x")),
    "a set's element nothing binds": ("s contains x if { input.x }\n", UNSAFE.format("x")),
    "a set element's object key": ("s contains {k: 1} if { input.x }\n", UNSAFE.format("k")),
    "an object's key nothing binds": ("o[k] := 1 if { input.x }\n", UNSAFE.format("k")),
    "an object's value nothing binds": ("o[k] := v if { some k in input.xs }\n", UNSAFE.format("v")),
    "a nested key": ("a.b[x] := 1 if { input.x }\n", UNSAFE.format("x")),
    "a key inside the path": ("a[x].c := 1 if { input.x }\n", UNSAFE.format("x")),
    "a wildcard key": ("a[_] := 1 if { input.x }\n", UNSAFE.format("_")),
    # comprehensions
    "an array comprehension's term": ("p := [x | input.x]\n", UNSAFE.format("x")),
    "a set comprehension's term": ("p := {x | input.x}\n", UNSAFE.format("x")),
    "an object comprehension's value": ("p := {k: v | some k in input.xs}\n", UNSAFE.format("v")),
    "an object comprehension's key": ("p := {k: v | some v in input.xs}\n", UNSAFE.format("k")),
    "a wildcard term": ("p := [_ | some y in input.xs]\n", UNSAFE.format("_")),
    "a term only declared": ("p := [x | some x; true]\n", UNSAFE.format("x")),
    "a term only compared": ("p := [x | x == input.n]\n", UNSAFE.format("x")),
    "a term calling a function": ("p := [count(x) | true]\n", UNSAFE.format("x")),
    "a comprehension in a body": ("ok if { s := [x | input.x]; count(s) > 0 }\n", UNSAFE.format("x")),
    "a term bound only in a sibling comprehension": (
        "ok if { a := [x | some x in input.xs]; b := [x | true]; a == b }\n", UNSAFE.format("x")),
    "a comprehension in a with value": ("ok if { input.a with input as [x | true] }\n", UNSAFE.format("x")),
    "a nested comprehension's term": ("p := [[y | true] | some x in input.xs]\n", UNSAFE.format("y")),
    "a comprehension inside every": ("ok if { every k in input.xs { k; count([j | true]) > 0 } }\n",
                                     UNSAFE.format("j")),
    # a default's value
    "a default's variable": ("default p := x\n", DEFAULT.format("var")),
    "a default's reference": ("default p := input.a\n", DEFAULT.format("ref")),
    "a default's call": ("default p := count([1])\n", DEFAULT.format("call")),
    "a default's comprehension term": ("default p := [x | true]\n", UNSAFE.format("x")),
}
# name -> (rules defining ``out``, the value ``out`` has for INPUT, in Rego)
LOADED = {
    "a function's value bound by its body": ("f(x) := y if { y := x + 1 }\nout := f(1)\n", "2"),
    "a function's value from an argument pattern": ("f([a, b]) := a + b\nout := f([1, 2])\n", "3"),
    "an argument reading another argument": ('f(x, x.a) := 1\nout := f({"a": 2}, 2)\n', "1"),
    "a function's comprehension over its argument": ("f(x) := [y | some y in x]\nout := f([4])\n", "[4]"),
    "a function's else value from its argument": ("f(x) := 0 if { x > 5 } else := x\nout := [f(1), f(9)]\n",
                                                  "[1, 0]"),
    "an else value bound by its own body": ("a := 1 if { input.no } else := y if { y := 2 }\nout := a\n", "2"),
    "a value bound by some": ("out := x if { some x in input.xs; x > 15 }\n", "20"),
    "a value bound by unification": ("out := x if { x = input.m.a }\n", "1"),
    "a value bound by a pattern": ("s contains x if { [x, _] = input.xs }\nout := s\n", "{10}"),
    "a value bound by an output argument": ("out := x if { walk(input.m, [_, x]); is_number(x) }\n", "1"),
    "a value bound by a reference's index": ("out := x if { input.m[x] }\n", '"a"'),
    "a set element read by an index": ("s contains input.xs[i] if true\nout := s\n", "{10, 20}"),
    "an object bound by some": ("o[k] := v if { some k, v in input.m }\nout := o\n", '{"a": 1}'),
    "a rule's name": ("q := 1\nout := [q | true]\n", "[1]"),
    "an import": ("import input.m\nout := m.a\n", "1"),
    "a term bound around the comprehension": ("out := [x | true] if { x := 3 }\n", "[3]"),
    "a term bound after the comprehension": ("out if { a := [x | true]; x = 1; a == [1] }\n", "true"),
    "a term bound by every's key": ("out if { every k in input.xs { count([k | true]) == 1 } }\n", "true"),
    "a term read by an index": ("out := [input.xs[i] | true]\n", "[10, 20]"),
    "a wildcard in a term's index": ("out := {input.xs[_] | true}\n", "{10, 20}"),
    "an object comprehension": ("out := {k: v | some k, v in input.m}\n", '{"a": 1}'),
    "a nested comprehension over the outer term": ("out := [[x | true] | some x in input.xs]\n", "[[10], [20]]"),
    "a default's comprehension": ("default out := [x | some x in input.xs]\n", "[10, 20]"),
}
# OPA compiles these (the value's reference binds the key) and decides as given; regorus fails them
# at run time, which denies (policy_unavailable): loaded, as OPA would, not refused
REGORUS_FAILS = {
    "a key bound by the value's index": ("o[k] := input.xs[k] if true\nout := o\n", "{0: 10, 1: 20}"),
    "an object comprehension's key bound by its value's index": ("out := {x: input.xs[x] | true}\n",
                                                                 "{0: 10, 1: 20}"),
}




@pytest.mark.parametrize("name", REFUSED)
def test_an_unsafe_head_does_not_load(tmp_path, name):
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


def test_regorus_alone_loads_these_and_fails_or_misanswers():
    """Why this matters: without the check, a call reaching one fails, or gets an answer OPA never gives."""
    engine = regorus.Engine()
    engine.add_policy("p.rego", H + "f(x) := y if { x > 1 }\ng(input.a) := 1\nfails := f(2)\n"
                                    "matched := g(1)\nempty := [x | some x; true]\n")
    engine.set_input_json(json.dumps({"a": 1}))
    with pytest.raises(RuntimeError, match="var y is unsafe"):
        engine.eval_rule_as_json("data.toolgate.fails")
    assert json.loads(engine.eval_rule_as_json("data.toolgate.matched")) == 1  # input.a matched as a pattern
    assert json.loads(engine.eval_rule_as_json("data.toolgate.empty")) == []


def test_the_message_names_the_line_and_the_rule(tmp_path):
    bundle = rules_bundle(tmp_path, "a := 1 if {\n  input.x\n} else := y if {\n  input.z\n}\n")
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(bundle)
    assert str(err.value).startswith(f"{bundle / 'p.rego'}:5: rego_unsafe_var_error: var y is unsafe: the `else` "
                                     f"value of a uses it and nothing binds it (bind it in that `else`'s body")


def test_policy_check_reports_the_variable(tmp_path):
    parser = argparse.ArgumentParser(prog="toolgate")
    policy_cmd.add_parser(parser.add_subparsers(dest="command"))
    bundle = rules_bundle(tmp_path, REFUSED["a function's value nothing binds"][0])
    ns = parser.parse_args(["policy", "check", str(bundle)])
    out = io.StringIO()
    assert ns.func(ns, out=out, err=out) == 2
    assert "p.rego:3: rego_unsafe_var_error: var y is unsafe: the value of f" in out.getvalue()


@pytest.mark.asyncio
async def test_a_reload_to_such_a_bundle_keeps_the_old_policy(tmp_path):
    bundle = rules_bundle(tmp_path, *LOADED["a value bound by some"])
    engine = EmbeddedEngine.from_bundle(bundle)
    version = engine.version
    (bundle / "p.rego").write_text(rules_text(REFUSED["a rule's value nothing binds"][0]))
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
    code, _, message = says.partition(": ")
    assert code in out and message in out, out


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


# Generated rules: heads, else values, function arguments and comprehension terms over a few
# variables, with bodies that bind some of them (``some``, ``=``, ``[x]``, an output argument) and use
# others (``==``, ``in``, a call's argument), comprehensions and ``every`` nested in both. Bodies stay
# inside what the checks cover: binders come first (no ``var x referenced above``), a variable is not
# used only under ``not``, the types stay loose (no type errors), and a nested body declares no
# ``some`` (regorus's own check refuses one naming a variable of the body around it, which OPA allows).
VARS = ["x", "y", "z"]


def _term(rng: random.Random, depth: int) -> str:
    v = rng.choice(["_", *VARS] if rng.random() < 0.1 else VARS)
    shapes = [v, f"[{v}, 1]", f'{{"k": {v}}}', f"input.xs[{v}]", f"{v}.a", "1"]
    shape = rng.choice(shapes + (["compr"] if depth < 2 else []))
    return _compr(rng, depth + 1) if shape == "compr" else shape


def _compr(rng: random.Random, depth: int) -> str:
    body = "; ".join(_body(rng, depth, rng.randint(0, 2))) or "true"
    kind = rng.randrange(3)
    if kind == 2:
        return f"{{{rng.choice(VARS)}: {_term(rng, depth)} | {body}}}"
    return f"[{_term(rng, depth)} | {body}]" if kind == 0 else f"{{{_term(rng, depth)} | {body}}}"


def _body(rng: random.Random, depth: int, count: int) -> list[str]:
    binds: list[str] = []
    uses: list[str] = []
    for _ in range(count):
        v, roll = rng.choice(VARS), rng.random()
        if roll < 0.55:
            bind = rng.choice([f"some {v} in input.xs", f"{v} = input.n", f"input.m[{v}]", f"[{v}, _] = input.xs",
                               f"walk(input, [_, {v}])"])
            if bind.startswith("some") and depth:
                bind = f"{v} = input.n"  # regorus refuses a ``some`` in a nested body naming an outer one
            if bind not in binds:  # a ``some`` declares: before anything else, once
                binds.insert(0, bind) if bind.startswith("some") else binds.append(bind)
        elif roll < 0.75:
            uses.append(rng.choice([f"{v} == input.n", f"{v} in input.xs", f"count([{v}]) > 0"]))
        elif depth < 2 and roll < 0.88:
            uses.append(f"count({_compr(rng, depth + 1)}) >= 0")
        elif depth < 2:
            inner = "; ".join(_body(rng, depth + 1, 1)) or "true"
            uses.append(f"every e{depth} in input.xs {{ e{depth}; {inner} }}")
    return binds + uses


def _rule(rng: random.Random) -> str:
    body = "; ".join(_body(rng, 0, rng.randint(0, 3))) or "true"
    term = _term(rng, 0)
    kind = rng.randrange(6)
    if kind == 3:
        arg = rng.choice(["a", "[a, x]", '{"k": x}', "x", "input.a", "a.b", "count(a)", "[y | some y in input.xs]"])
        return f"f({arg}) := {term} if {{ {body} }}"
    if kind == 4:
        other = "; ".join(_body(rng, 0, rng.randint(0, 2))) or "true"
        return f"p := {term} if {{ {body} }} else := {_term(rng, 0)} if {{ {other} }}"
    return [f"p := {term} if {{ {body} }}", f"s contains {term} if {{ {body} }}",
            f"o[{rng.choice(VARS)}] := {term} if {{ {body} }}", "", "", f"ok if {{ {body} }}"][kind]


@pytest.mark.opa
@pytest.mark.parametrize("seed", [5, 6])
def test_generated_rules_against_opa(opa_binary, tmp_path, seed):
    """Never a refusal here that OPA does not make, and every rule OPA refuses does not load."""
    rng = random.Random(seed)
    texts = {f"c{i}.rego": f"package c{i}\nimport rego.v1\n{_rule(rng)}\n" for i in range(200)}
    write_bundle(tmp_path / "all", texts)
    opa_refuses = opa_errors(opa_binary, tmp_path / "all")
    ours_only = 0
    for name, text in texts.items():
        rule = text.splitlines()[-1]
        (tmp_path / "one.rego").write_text(text)
        engine = regorus.Engine()
        engine.add_policy(str(tmp_path / "one.rego"), text)
        ours = list(unsafe_heads(json.loads(engine.get_ast_as_json())))
        assert not ours or name in opa_refuses, f"refused what OPA compiles: {rule}: {ours}"
        try:
            compile_bundle(read_bundle(tmp_path / "one.rego"))
            loads = True
        except PolicyLoadError as exc:
            loads, ours_only = False, ours_only + (str(exc) in ours)
        assert loads == (name not in opa_refuses), f"{'loads' if loads else 'refused'} here, not in OPA: {rule}"
    assert ours_only > 50  # this check's, not regorus's own: refused here only because of it
