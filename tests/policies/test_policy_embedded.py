"""EmbeddedEngine: loading, failing closed, reload, versions — on real regorus, no mocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import UNDEFINED, EmbeddedEngine, PolicyError, PolicyLoadError

ALLOW = 'package toolgate\nimport rego.v1\ndecision := {"decision": "allow", "reasons": ["v1"]}\n'
DENY = 'package toolgate\nimport rego.v1\ndecision := {"decision": "deny", "reasons": ["v2"]}\n'


def bundle(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


async def test_evaluates_a_bundle(tmp_path):
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": ALLOW}))
    decision = await engine.evaluate({})
    assert (decision.decision, decision.reasons) == ("allow", ["v1"])


async def test_engine_error_is_policy_unavailable(tmp_path):
    policy = 'package toolgate\nimport rego.v1\ndecision := {"decision": "allow"} if { 1 / input.n > 0 }\n'
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": policy}))
    assert (await engine.evaluate({"n": 1})).decision == "allow"
    with pytest.raises(PolicyError) as info:
        await engine.evaluate({"n": 0})
    assert info.value.code == "policy_unavailable"
    assert "p.rego" in info.value.detail


async def test_conflicting_values_are_policy_unavailable(tmp_path):
    policy = (
        'package toolgate\nimport rego.v1\ndecision := {"decision": "allow"} if input.a\n'
        'decision := {"decision": "deny"} if input.b\n'
    )
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": policy}))
    with pytest.raises(PolicyError) as info:
        await engine.evaluate({"a": True, "b": True})
    assert info.value.code == "policy_unavailable"


@pytest.mark.parametrize(
    "rule",
    [
        'decision := {"decision": "allow"} if input.ok',  # undefined for this input
        'decision := {"decision": "allow", "approved": true}',  # an unknown field
        # eval_rule_as_json reports undefined as the string "<undefined>": a rule with that
        # value reads as undefined, and either way there is no decision
        'decision := "<undefined>"',
    ],
    ids=["undefined", "unknown_field", "spelled_like_undefined"],
)
async def test_a_policy_answer_that_is_not_a_decision_is_invalid(tmp_path, rule):
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": f"package toolgate\nimport rego.v1\n{rule}\n"}))
    with pytest.raises(PolicyError) as info:
        await engine.evaluate({})
    assert info.value.code == "policy_invalid_decision"


def _cyclic() -> dict:
    value: dict = {}
    value["self"] = value
    return value


@pytest.mark.parametrize("doc", [{"x": float("nan")}, {"x": object()}, {"x": {1, 2}}, {"x": "\ud800"}, _cyclic()],
                         ids=["nan", "object", "set", "lone-surrogate", "cyclic"])
async def test_unserialisable_input_is_policy_unavailable(tmp_path, doc):
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": ALLOW}))
    with pytest.raises(PolicyError) as info:
        await engine.evaluate(doc)
    assert info.value.code == "policy_unavailable"
    assert (await engine.evaluate({"x": 1})).decision == "allow"  # and the next input is read afresh


async def test_evaluation_over_the_timeout_denies(tmp_path):
    slow = (
        'package toolgate\nimport rego.v1\ndecision := {"decision": "allow"} if {\n'
        "  count([x | some x in numbers.range(1, 200000); x % 7 == 0]) > 0\n}\n"
    )
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": slow}), timeout_ms=1)
    with pytest.raises(PolicyError) as info:
        await engine.evaluate({})
    assert info.value.code == "policy_unavailable"
    assert "timeout" in info.value.detail


def test_missing_builtin_is_refused_at_load_naming_it(tmp_path):
    policy = (
        "package toolgate\nimport rego.v1\n"
        'decision := {"decision": "allow"} if {\n  input.x\n  strings.split_n(input.s, ",", 2)\n}\n'
    )
    with pytest.raises(PolicyLoadError) as info:
        EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": policy}))
    message = str(info.value)
    assert "strings.split_n" in message
    assert "p.rego:5" in message
    assert "policy.engine: opa" in message


def test_user_functions_are_not_mistaken_for_missing_builtins(tmp_path):
    policy = (
        "package toolgate\nimport rego.v1\nhelper(x) := x\n"
        'decision := {"decision": "allow", "reasons": [helper(lower("A"))]}\n'
    )
    EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": policy}))


async def test_a_helper_named_like_a_missing_builtin_does_not_hide_it(tmp_path):
    # util.split_n is a user function; strings.split_n (in another package) is a builtin regorus
    # lacks: the bundle must be refused at load (and a reload keep the old policy), not load
    # and then deny every call that reaches the builtin
    files = {
        "util.rego": "package util\nimport rego.v1\nsplit_n(s, d, n) := split(s, d)\n",
        "p.rego": (
            "package toolgate\nimport rego.v1\n"
            'decision := {"decision": "allow"} if count(strings.split_n(input.s, ",", 2)) > 0\n'
        ),
    }
    with pytest.raises(PolicyLoadError, match=r"p\.rego:3: builtin strings\.split_n"):
        EmbeddedEngine.from_bundle(bundle(tmp_path, files))
    root = bundle(tmp_path / "ok", {"p.rego": ALLOW})
    engine = EmbeddedEngine.from_bundle(root)
    bundle(root, files)
    with pytest.raises(PolicyLoadError):
        await engine.reload()
    assert (await engine.evaluate({"s": "a,b"})).decision == "allow"


def test_user_functions_called_through_imports_and_data_are_not_probed(tmp_path):
    files = {
        "lib/util.rego": "package lib.util\nimport rego.v1\nsplit_n(s, d, n) := split(s, d)\n",
        "p.rego": (
            "package toolgate\nimport rego.v1\nimport data.lib.util\nimport data.lib.util as u\n"
            "helpers.twice(x) := x * 2\n"
            "a := util.split_n(input.s, \",\", 2)\nb := u.split_n(input.s, \",\", 2)\n"
            "c := data.lib.util.split_n(input.s, \",\", 2)\nd := helpers.twice(2)\n"
            'decision := {"decision": "allow"} if count(a) + count(b) + count(c) + d > 0\n'
        ),
    }
    EmbeddedEngine.from_bundle(bundle(tmp_path, files))


def test_parse_error_names_file_and_line(tmp_path):
    with pytest.raises(PolicyLoadError) as info:
        EmbeddedEngine.from_bundle(bundle(tmp_path, {"ok.rego": ALLOW, "bad.rego": "package toolgate\n\nx := \n"}))
    assert "bad.rego:4" in str(info.value)


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "no .rego policy files"),
        ({"p_test.rego": ALLOW}, "no .rego policy files"),
        ({"p.rego": ALLOW, "data.json": "{nope"}, "not valid JSON"),
        ({"p.rego": ALLOW, "data.json": "[1]"}, "must be an object"),
        ({"p.rego": ALLOW, "data.yaml": "a: [\n"}, "not valid YAML"),
    ],
    ids=["empty_folder", "only_tests", "bad_json", "data_not_object", "bad_yaml"],
)
def test_unloadable_bundles_are_refused(tmp_path, files, message):
    with pytest.raises(PolicyLoadError) as info:
        EmbeddedEngine.from_bundle(bundle(tmp_path, files))
    assert message in str(info.value)


def test_missing_folder_is_refused(tmp_path):
    with pytest.raises(PolicyLoadError, match="no such policy bundle"):
        EmbeddedEngine.from_bundle(tmp_path / "nope")


async def test_data_files_mount_at_their_folder(tmp_path):
    policy = 'package toolgate\nimport rego.v1\ndecision := {"decision": data.toolgate.limits.mode}\n'
    root = bundle(tmp_path, {"toolgate/p.rego": policy, "toolgate/limits/data.yaml": "mode: deny\n"})
    assert (await EmbeddedEngine.from_bundle(root).evaluate({})).decision == "deny"


async def test_test_files_are_not_loaded(tmp_path):
    broken_test = "package toolgate_test\nimport rego.v1\ntest_x if { 1 / 0 }\n"
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": ALLOW, "p_test.rego": broken_test}))
    assert (await engine.evaluate({})).decision == "allow"


async def test_reload_swaps_in_the_new_policy(tmp_path):
    root = bundle(tmp_path, {"p.rego": ALLOW})
    engine = EmbeddedEngine.from_bundle(root)
    old_version = engine.version
    (root / "p.rego").write_text(DENY)
    await engine.reload()
    assert (await engine.evaluate({})).reasons == ["v2"]
    assert engine.version != old_version


async def test_reload_keeps_the_old_policy_when_the_new_one_is_broken(tmp_path):
    root = bundle(tmp_path, {"p.rego": ALLOW})
    engine = EmbeddedEngine.from_bundle(root)
    version = engine.version
    (root / "p.rego").write_text(DENY.replace('"deny"', 'strings.split_n("a", "b", 1)'))
    with pytest.raises(PolicyLoadError, match="strings.split_n"):
        await engine.reload()
    (root / "q.rego").write_text("package toolgate\nx := \n")
    with pytest.raises(PolicyLoadError):
        await engine.reload()
    assert (await engine.evaluate({})).reasons == ["v1"]
    assert engine.version == version


def test_version_is_content_hash_independent_of_location(tmp_path):
    a = EmbeddedEngine.from_bundle(bundle(tmp_path / "a", {"p.rego": ALLOW, "data.json": '{"k": 1}'}))
    b = EmbeddedEngine.from_bundle(bundle(tmp_path / "b", {"p.rego": ALLOW, "data.json": '{"k": 1}'}))
    c = EmbeddedEngine.from_bundle(bundle(tmp_path / "c", {"p.rego": ALLOW, "data.json": '{"k": 2}'}))
    assert a.version == b.version != c.version
    assert a.version.startswith("sha256:") and len(a.version) == len("sha256:") + 16


async def test_query_returns_values_and_undefined(tmp_path):
    policy = ALLOW + "visible := true if input.show\n"
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": policy}))
    assert await engine.query("data.toolgate.visible", {"show": True}) is True
    assert await engine.query("data.toolgate.visible", {}) is UNDEFINED


async def test_query_engine_error_is_policy_unavailable(tmp_path):
    policy = ALLOW + "boom := 1 / input.n\n"
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": policy}))
    with pytest.raises(PolicyError) as info:
        await engine.query("data.toolgate.boom", {"n": 0})
    assert info.value.code == "policy_unavailable"


async def test_paths_that_are_not_rules_are_queried(tmp_path):
    """Rules go through eval_rule; a package or a data document falls back to a query."""
    policy = ALLOW + "visible := true\n"
    root = bundle(tmp_path, {"p.rego": policy, "toolgate/data.json": '{"limits": {"refund": 100}}'})
    engine = EmbeddedEngine.from_bundle(root)
    package = await engine.query("data.toolgate", {})
    assert package["visible"] is True and package["decision"]["decision"] == "allow"
    assert await engine.query("data.toolgate.limits", {}) == {"refund": 100}
    assert await engine.query("data.toolgate.visible", {}) is True  # a rule, after the queries
    assert await engine.query("data.nothing.here", {}) is UNDEFINED


async def test_reload_forgets_which_paths_are_rules(tmp_path):
    root = bundle(tmp_path, {"p.rego": ALLOW + "limits := {\"refund\": 1}\n"})
    engine = EmbeddedEngine.from_bundle(root)
    assert await engine.query("data.toolgate.limits", {}) == {"refund": 1}
    (root / "p.rego").write_text(ALLOW)
    (root / "toolgate").mkdir()
    (root / "toolgate" / "data.json").write_text('{"limits": {"refund": 2}}')
    await engine.reload()
    assert await engine.query("data.toolgate.limits", {}) == {"refund": 2}


async def test_a_closed_engine_denies(tmp_path):
    engine = EmbeddedEngine.from_bundle(bundle(tmp_path, {"p.rego": ALLOW}))
    assert (await engine.evaluate({})).decision == "allow"
    await engine.close()
    with pytest.raises(PolicyError) as info:
        await engine.evaluate({})
    assert info.value.code == "policy_unavailable"
