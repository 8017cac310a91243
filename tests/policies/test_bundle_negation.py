"""A variable that appears only under ``not`` does not load (``policies._negation``), checked
against the pinned OPA's ``opa check``.

OPA refuses ``not deny[x]`` with nothing binding ``x`` (and ``not deny[_]``) as unsafe; regorus
loaded it and evaluated the negation as false whatever ``deny`` held, so a rule meant to fire
when a set is empty never fired.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import regorus

from policies import EmbeddedEngine
from policies._bundle import check_variables
from policies._errors import PolicyLoadError
from policies._negation import unsafe_negations
from policies._owned import OwnedEngine

from bundle_files import opa_check, opa_errors, write_bundle

H = "package toolgate\nimport rego.v1\n"
DENY = 'default decision := {"decision": "deny", "reasons": ["no"]}\n'
P = "p := {1}\n"

# name -> (policy text, the variable the refusal names: regorus's own check, run first, names some)
REFUSED = {
    "unbound under not": (H + DENY + P + "ok if { not p[x] }\n", "x"),
    "a wildcard under not": (H + DENY + P + "ok if { not p[_] }\n", "_"),
    "declared, never bound": (H + DENY + P + "ok if { some x; not p[x] }\n", "x"),
    "unbound in a comprehension": (H + DENY + P + "s := {v | some v in input.a; not p[w]}\n", "w"),
    "bound only inside a comprehension": (H + DENY + P + "ok if { s := [y | some y in input.b]; not p[y] }\n",
                                          "y"),
    "unbound inside every": (H + DENY + P + "ok if { every k, v in input.m { v; not p[z] } }\n", "z"),
    "unbound value for with": (H + DENY + "q := 1 if input\nok if { not q with input as z }\n", "z"),
    "an unbound argument of a call": (H + DENY + 'ok if { not startswith(input.a, pre) }\n', "pre"),
    "unbound in an else": (H + DENY + P + "d := 1 if { input.x } else := 2 if { not p[y] }\n", "y"),
    "unbound in a head's comprehension": (H + DENY + P + "s := {v | some v in input.a; not p[w]} if input.x\n",
                                          "w"),
    "an unbound object key": (H + DENY + 'ok if { not {"a": 1}[k] }\n', "k"),
    "a rule of another package by a variable": (H + DENY + "ok if { not data.other.p[x] }\n", "x"),
}
LOADED = {
    "bound before": H + DENY + P + "ok if { some x in input.a; not p[x] }\n",
    "declared, then bound": H + DENY + P + "ok if { some x; input.a[x]; not p[x] }\n",
    "a function's argument": H + DENY + P + "f(x) if { not p[x] }\n",
    "a function's argument pattern": H + DENY + P + "f([x, y]) if { not p[x]; not p[y] }\n",
    "a rule's name": H + DENY + P + "q := 1\nok if { not p[q] }\n",
    "a comprehension's own variable": H + DENY + P + "s := {v | some v in input.a; not p[v]}\n",
    "an outer variable in a comprehension": H + DENY + P
    + "ok if { some x in input.a; s := {v | some v in input.b; not p[x]}; count(s) > 0 }\n",
    "every's key": H + DENY + P + "ok if { every k, v in input.m { v; not p[k] } }\n",
    "a bound value for with": H + DENY + 'q := 1 if input.b\nok if { z := {"a": 1}; not q with input as z }\n',
    "a builtin's name": H + DENY + 'ok if { not startswith(input.a, "x") }\n',
    "a comprehension in the term": H + DENY + P + "s := {x: {1 | not p[x]} | some x in input.a}\n",
    "a head variable bound after": H + DENY + 'deny contains msg if { not input.ok; msg := "no" }\n',
    "an import": H + "import data.lib.q\n" + DENY + "ok if { not q[1] }\n",
    "an import in brackets": H + 'import data.lib["q"]\n' + DENY + "ok if { not q[1] }\n",
    "an input import in brackets": H + 'import input["user"]\n' + DENY + "ok if { not user.admin }\n",
    "a package in brackets, its rule in another file": 'package toolgate["sub"]\nimport rego.v1\nok if { not r }\n',
}
FILES = {
    "an import": {"lib.rego": "package lib\nimport rego.v1\nq := {2}\n"},
    "an import in brackets": {"lib.rego": "package lib\nimport rego.v1\nq := {2}\n"},
    "a package in brackets, its rule in another file": {"r.rego": "package toolgate.sub\nimport rego.v1\nr if input.x\n",
                                                         "d.rego": H + DENY},
}


def _bundle(tmp_path: Path, name: str, text: str) -> Path:
    return write_bundle(tmp_path, {"p.rego": text, **FILES.get(name, {})})


@pytest.mark.parametrize("name", REFUSED)
def test_a_variable_only_under_not_does_not_load(tmp_path, name):
    text, says = REFUSED[name]
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(_bundle(tmp_path, name, text))
    assert f"var {says} is unsafe" in str(err.value) or f"variable `{says}` is unsafe" in str(err.value)
    assert "p.rego:" in str(err.value)


@pytest.mark.parametrize("name", LOADED)
def test_a_bound_variable_under_not_loads(tmp_path, name):
    engine = EmbeddedEngine.from_bundle(_bundle(tmp_path, name, LOADED[name]))
    assert engine.evaluate_sync({"a": [1, 2], "b": [3], "m": {"k": True}}).decision == "deny"


def test_the_negation_would_have_turned_a_denial_off(tmp_path):
    """Why this matters: regorus evaluates ``not approved[x]`` as false even when nothing is approved."""
    engine = regorus.Engine()
    engine.add_policy("p.rego", H + 'approved contains 1 if input.ok\ndeny contains "unapproved" if { not approved[x] }\n')
    engine.set_input_json("{}")
    assert engine.eval_rule_as_json("data.toolgate.deny") == "[]"  # no denial, with nothing approved


@pytest.mark.opa
@pytest.mark.parametrize("name", [*REFUSED, *LOADED])
def test_opa_agrees(opa_binary, tmp_path, name):
    text = REFUSED[name][0] if name in REFUSED else LOADED[name]
    checked = opa_check(opa_binary, _bundle(tmp_path, name, text))
    assert (checked.returncode != 0) == (name in REFUSED), checked.stdout + checked.stderr


VARS = ["x", "y", "z", "_"]
FLAT = ["some {v} in input.a", "{v} := input.b", "input.c[{v}]", "p[{v}]", "not p[{v}]", "not input.d[{v}]",
        "not f({v})"]


def _statement(rng: random.Random, nested: bool) -> str:
    v = rng.choice(VARS)
    kind = rng.randrange(len(FLAT) + (2 if nested else 0))
    if kind < len(FLAT):
        return FLAT[kind].format(v=v) if FLAT[kind] != "{v} := input.b" or v != "_" else "input.b"
    inner = "; ".join(_statement(rng, False) for _ in range(rng.randint(1, 2)))
    return f"s := {{ {v} | {inner} }}" if kind == len(FLAT) else f"every {v if v != '_' else 'e'} in input.a {{ {inner} }}"


@pytest.mark.opa
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_generated_bodies_against_opa(opa_binary, tmp_path, nested):
    """Never a refusal OPA does not make. For flat bodies (no comprehension or every), the two
    checks here refuse exactly the bodies OPA calls unsafe."""
    rng = random.Random(7 if nested else 3)
    texts = {}
    for i in range(200):
        body = "; ".join(_statement(rng, nested) for _ in range(rng.randint(1, 3)))
        texts[f"c{i}.rego"] = f"package c{i}\nimport rego.v1\np := {{1}}\nf(a) if a == 1\nok if {{ {body} }}\n"
        (tmp_path / f"c{i}.rego").write_text(texts[f"c{i}.rego"])
    errors = opa_errors(opa_binary, tmp_path)
    for name, text in texts.items():
        owned = OwnedEngine()
        owned.engine.add_policy(name, text)
        ours = list(unsafe_negations(json.loads(owned.engine.get_ast_as_json())))
        try:
            check_variables(owned)
            regorus_refuses = False
        except PolicyLoadError:
            regorus_refuses = True
        body = text.splitlines()[-1]
        assert not ours or name in errors, f"refused what OPA compiles: {body}: {ours}"
        opa_unsafe = any(code == "rego_unsafe_var_error" for code, _ in errors.get(name, []))
        if not nested:
            assert opa_unsafe <= bool(ours or regorus_refuses), f"OPA calls unsafe, loaded here: {body}"
