"""A rule body with a variable nothing binds, or one assigned twice, does not load (OPA's
``rego_unsafe_var_error`` / ``assigned above``), checked against the pinned OPA's ``opa check``.

regorus loaded these and found them only on its first evaluation, so the gateway started with a
policy that denied every call (``policy_unavailable``) and ``toolgate policy check`` passed it.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from gateway.cli import policy_cmd
from policies import EmbeddedEngine
from policies._errors import PolicyLoadError

from bundle_files import opa_check, write_bundle

H = "package toolgate\nimport rego.v1\n"
DENY = 'default decision := {"decision": "deny", "reasons": ["no"]}\n'

# name -> (policy text, what the refusal names)
REFUSED = {
    "an unbound variable, behind a guard": (H + DENY + "ok if { input.x == 1; x == y }\n", "`x` is unsafe"),
    "an unbound variable in a function nothing calls": (H + DENY + "f(a) := a if { a == c }\n", "`c` is unsafe"),
    "a variable assigned twice": (H + DENY + "ok if { x := 1; x := 2 }\n", "`x`"),
    "an unbound domain of every": (H + DENY + "ok if { every v in vs { v } }\n", "`vs` is unsafe"),
    "an unbound variable in a comprehension": (H + DENY + "s := {v | w == 1}\n", "is unsafe"),
    "an unbound value for with": (H + DENY + "ok if { input.a with input as z }\n", "`z` is unsafe"),
}
LOADED = {
    "some in": H + DENY + "ok if { some v in input.xs; v == 1 }\n",
    "assignment then use": H + DENY + "ok if { n := count(input.xs); n > 1 }\n",
    "function arguments": H + DENY + "f(a, b) := a + b\nok if f(1, 2) == 3\n",
    "a comprehension over input": H + DENY + "s := {v | some v in input.xs}\n",
    "every over input": H + DENY + "ok if { every v in input.xs { v > 0 } }\n",
    "a rule referenced by name": H + DENY + "limit := 5\nok if input.n < limit\n",
}


def _bundle(tmp_path: Path, text: str) -> Path:
    return write_bundle(tmp_path, {"p.rego": text})


@pytest.mark.parametrize("name", REFUSED)
def test_an_unsafe_or_reassigned_variable_does_not_load(tmp_path, name):
    text, says = REFUSED[name]
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(_bundle(tmp_path, text))
    assert says in str(err.value)
    assert "p.rego:" in str(err.value)  # where, for the policy's author
    assert "Stack backtrace" not in str(err.value)


@pytest.mark.parametrize("name", LOADED)
def test_bound_variables_load_and_decide(tmp_path, name):
    engine = EmbeddedEngine.from_bundle(_bundle(tmp_path, LOADED[name]))
    assert engine.evaluate_sync({"xs": [1, 2], "n": 1, "a": 1}).decision == "deny"


def test_policy_check_reports_the_variable(tmp_path):
    parser = argparse.ArgumentParser(prog="toolgate")
    policy_cmd.add_parser(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["policy", "check", str(_bundle(tmp_path, REFUSED["an unbound variable, behind a guard"][0]))])
    out = io.StringIO()
    assert ns.func(ns, out=out, err=out) == 2
    assert "`x` is unsafe" in out.getvalue() and "p.rego:4" in out.getvalue()


@pytest.mark.asyncio
async def test_a_reload_to_such_a_bundle_keeps_the_old_policy(tmp_path):
    bundle = _bundle(tmp_path, LOADED["some in"])
    engine = EmbeddedEngine.from_bundle(bundle)
    version = engine.version
    (bundle / "p.rego").write_text(REFUSED["an unbound variable, behind a guard"][0])
    with pytest.raises(PolicyLoadError):
        await engine.reload()
    assert engine.version == version
    assert (await engine.evaluate({"xs": []})).decision == "deny"


@pytest.mark.opa
@pytest.mark.parametrize("name", [*REFUSED, *LOADED])
def test_opa_agrees(opa_binary, tmp_path, name):
    text = REFUSED[name][0] if name in REFUSED else LOADED[name]
    checked = opa_check(opa_binary, _bundle(tmp_path, text))
    assert (checked.returncode != 0) == (name in REFUSED), checked.stdout + checked.stderr


def test_a_refusal_regorus_words_as_a_warning_says_why(tmp_path):
    """``import data`` loads in OPA; regorus fails every evaluation of it, with a ``warning:``
    line, which the refusal used to leave out (it read only ``error:`` lines)."""
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(_bundle(tmp_path, H + "import data\n" + DENY))
    assert "invalid ref in import" in str(err.value)
