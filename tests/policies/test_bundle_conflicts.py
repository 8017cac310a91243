"""Definitions OPA refuses to compile are refused by the embedded engine too (``policies._conflicts``),
each checked against the real ``opa check`` of the pinned OPA: regorus loaded them and then
decided with one of them, so a data file shadowing a rule could turn a policy's denials off."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from policies import EmbeddedEngine
from policies._errors import PolicyLoadError

from bundle_files import opa_check, write_bundle

REPO = Path(__file__).resolve().parents[2]
H = "package toolgate\nimport rego.v1\n"
DENY = 'default decision := {"decision": "deny", "reasons": ["no"]}\n'

# name -> (files, what the refusal says)
REFUSED = {
    "two defaults": ({"a.rego": H + DENY, "b.rego": H + 'default decision := {"decision": "allow"}\n'},
                     "multiple default rules for data.toolgate.decision"),
    "a data file where a rule is": ({"p.rego": H + DENY, "toolgate/data.json": '{"decision": {"decision": "allow"}}'},
                                    "conflicting rule for data path toolgate/decision"),
    "a data document above a rule": ({"p.rego": H + DENY, "data.json": '{"toolgate": {"decision": 1}}'},
                                     "conflicting rule for data path toolgate/decision"),
    "a data value where a rule's parent is": ({"p.rego": H + DENY, "data.json": '{"toolgate": 5}'},
                                              "conflicting rule for data path toolgate/decision"),
    "a function and a rule of one name": ({"p.rego": H + DENY + "f := 1\nf(x) := 2\n"},
                                          "data.toolgate.f is defined both as a function and as a rule"),
    "a partial set and data": ({"p.rego": H + DENY + 'deny contains "x" if input.bad\n',
                                "toolgate/data.json": '{"deny": []}'}, "conflicting rule for data path toolgate/deny"),
}
LOADED = {
    "data beside rules": {"p.rego": H + DENY + "limit := data.toolgate.limits.refund\n",
                          "toolgate/data.json": '{"limits": {"refund": 100}}'},
    "a default and its rule": {"p.rego": H + DENY + 'decision := {"decision": "allow"} if input.ok\n'},
    "one function, many clauses": {"p.rego": H + DENY + "f(1) := 2\nf(2) := 3\n"},
    "partial object rules": {"p.rego": H + DENY + 'o[k] := 1 if some k in ["a"]\no.b := 2\n'},
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_opa_refuses_to_compile_does_not_load(tmp_path, name):
    files, says = REFUSED[name]
    with pytest.raises(PolicyLoadError) as err:
        EmbeddedEngine.from_bundle(write_bundle(tmp_path, files))
    assert says in str(err.value)


@pytest.mark.parametrize("name", LOADED)
def test_what_opa_compiles_loads(tmp_path, name):
    EmbeddedEngine.from_bundle(write_bundle(tmp_path, LOADED[name]))


def test_the_default_bundle_with_a_data_file_shadowing_its_denials_does_not_load(tmp_path):
    bundle = tmp_path / "rego"
    shutil.copytree(REPO / "rego", bundle)
    (bundle / "toolgate").mkdir(exist_ok=True)
    (bundle / "toolgate" / "data.json").write_text('{"deny": []}')
    with pytest.raises(PolicyLoadError, match="conflicting rule for data path toolgate/deny"):
        EmbeddedEngine.from_bundle(bundle)


@pytest.mark.opa
@pytest.mark.parametrize("name", [*REFUSED, *LOADED])
def test_opa_agrees(opa_binary, tmp_path, name):
    files = REFUSED[name][0] if name in REFUSED else LOADED[name]
    checked = opa_check(opa_binary, write_bundle(tmp_path, files), "-b")
    assert (checked.returncode != 0) == (name in REFUSED), checked.stdout + checked.stderr
