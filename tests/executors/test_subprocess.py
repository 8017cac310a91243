import base64
import json
import os
import sys
import time

import pytest

from gateway.credentials import ResolvedCredentials
from gateway.execute import ExecuteStage, executor_factories
from gateway.executors.base import ExecutorRegistry, tenant_folder
from gateway.executors.subprocess import SubprocessExecutor
from gateway.normalize import normalize
from tests.executors._helpers import SECRET, call_context

PY = sys.executable


def _tool(make_tool, argv, **kw):
    executor = {"kind": "subprocess", "argv": argv, **kw.pop("executor_extra", {})}
    return make_tool("cmd", executor=executor, **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_placeholders_fill_one_argv_element_each_and_no_shell_runs(make_tool, make_request):
    tool = _tool(make_tool, [PY, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", "{q}", "x{n}y"],
                 executor_extra={"options": {"output": "json"}})
    hostile = "a b; touch pwned && echo $(id) `id` | cat > /tmp/x"
    result = await SubprocessExecutor().execute(make_request(tool, {"q": hostile, "n": 5}))
    assert result.ok, result
    assert result.data == [hostile, "x5y"]


async def test_a_value_that_would_be_an_option_is_refused(make_tool, make_request):
    tool = _tool(make_tool, ["echo", "{q}"])
    result = await SubprocessExecutor().execute(make_request(tool, {"q": "--help"}))
    assert not result.ok and result.error.type == "tool_error" and "-" in result.error.message


@pytest.mark.parametrize("argv", [["{prog}", "x"], ["echo", "{q.__class__}"], ["echo", "{q!r}"], ["echo", "{q:>10}"]])
async def test_unsafe_templates_are_refused(make_tool, make_request, argv):
    result = await SubprocessExecutor().execute(make_request(_tool(make_tool, argv), {"q": "x", "prog": "sh"}))
    assert not result.ok and result.error.type == "tool_error"


async def test_non_scalar_arguments_are_refused(make_tool, make_request):
    result = await SubprocessExecutor().execute(make_request(_tool(make_tool, ["echo", "{q}"]), {"q": ["a", "b"]}))
    assert not result.ok


async def test_child_gets_a_clean_environment_plus_granted_credentials(make_tool, make_request, monkeypatch):
    monkeypatch.setenv("GATEWAY_ONLY_SECRET", "must-not-leak")
    code = "import os, json; print(json.dumps(dict(os.environ)))"
    tool = _tool(make_tool, [PY, "-c", code], executor_extra={"env": {"MODE": "demo"}, "options": {"output": "json"}})
    creds = ResolvedCredentials(env={"API_TOKEN": "tok-123"}, secret_values=frozenset({"tok-123"}))
    result = await SubprocessExecutor().execute(make_request(tool, credentials=creds))
    env = result.data
    assert "GATEWAY_ONLY_SECRET" not in env
    assert env["API_TOKEN"] == "tok-123" and env["MODE"] == "demo"
    assert set(env) - {"PATH", "LANG", "HOME", "MODE", "API_TOKEN", "LC_CTYPE"} == set()


async def test_file_credential_is_a_private_file_removed_afterwards(make_tool, make_request):
    code = "import os, sys, json; p=sys.argv[1]; print(json.dumps([p, open(p).read(), oct(os.stat(p).st_mode & 0o777)]))"
    tool = _tool(make_tool, [PY, "-c", code, "{file:kubeconfig}"], executor_extra={"options": {"output": "json"}})
    creds = ResolvedCredentials(files={"kubeconfig": "kube-secret"}, secret_values=frozenset({"kube-secret"}))
    result = await SubprocessExecutor().execute(make_request(tool, credentials=creds))
    path, content, mode = result.data
    assert content == "kube-secret" and mode == "0o600"
    assert not os.path.exists(path)


async def test_runs_inside_the_sandbox_and_cwd_cannot_escape(make_tool, make_request):
    tool = _tool(make_tool, [PY, "-c", "import os; print(os.getcwd())"], executor_extra={"cwd": "work"})
    request = make_request(tool)
    result = await SubprocessExecutor().execute(request)
    assert result.data["stdout"].strip() == str((request.sandbox / "acme" / "work").resolve())
    escape = _tool(make_tool, ["pwd"], executor_extra={"cwd": "../.."})
    result = await SubprocessExecutor().execute(make_request(escape))
    assert not result.ok and "sandbox" in result.error.message


async def test_hanging_command_and_its_children_are_killed_at_the_timeout(make_tool, make_request, tmp_path):
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; echo started >&2; wait"
    tool = _tool(make_tool, ["sh", "-c", script], timeout_seconds=0.5)
    started = time.monotonic()
    result = await SubprocessExecutor().execute(make_request(tool))
    elapsed = time.monotonic() - started
    assert not result.ok and result.error.type == "timeout" and result.error.retryable
    assert elapsed < 5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)
    assert "started" in result.stderr


async def test_background_children_do_not_outlive_a_normal_exit(make_tool, make_request, tmp_path):
    pidfile = tmp_path / "bg.pid"
    tool = _tool(make_tool, ["sh", "-c", f"sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}; echo done"])
    result = await SubprocessExecutor().execute(make_request(tool))
    assert result.ok and result.data["stdout"] == "done\n"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)


async def test_a_background_child_holding_the_output_does_not_turn_an_exit_into_a_timeout(
        make_tool, make_request, tmp_path):
    """The tool exited 0 at once; a child it left running still holds stdout. That is the tool's
    success, answered when it exits (the child is killed with its group), not a timeout."""
    pidfile = tmp_path / "bg.pid"
    tool = _tool(make_tool, ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo done"], timeout_seconds=3)
    started = time.monotonic()
    result = await SubprocessExecutor().execute(make_request(tool))
    assert result.ok and result.data["stdout"] == "done\n", result
    assert time.monotonic() - started < 2.5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)


async def test_a_child_that_left_the_group_cannot_hold_the_call_past_its_timeout(make_tool, make_request, tmp_path):
    """A process in a session of its own is out of reach of the group kill and may hold the pipes
    open: the call still ends by its timeout (and a bounded wait for the output)."""
    pidfile = tmp_path / "escaped.pid"
    script = f"import os, subprocess; p = subprocess.Popen(['sleep', '30'], start_new_session=True); " \
             f"open({str(pidfile)!r}, 'w').write(str(p.pid)); os.system('sleep 300')"
    tool = _tool(make_tool, [PY, "-c", script], timeout_seconds=0.5)
    started = time.monotonic()
    try:
        result = await SubprocessExecutor().execute(make_request(tool))
        assert not result.ok and result.error.type == "timeout"
        assert time.monotonic() - started < 4
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), 9)


async def test_output_is_capped(make_tool, make_request):
    tool = _tool(make_tool, [PY, "-c", "import sys; sys.stdout.write('x' * 100000)"],
                 executor_extra={"options": {"max_output_bytes": 1000}})
    result = await SubprocessExecutor().execute(make_request(tool))
    assert result.ok and len(result.data["stdout"]) == 1000 and result.meta["truncated"] is True


async def test_non_zero_exit_is_a_tool_error_with_stderr(make_tool, make_request):
    tool = _tool(make_tool, [PY, "-c", "import sys; print('partial'); sys.exit('boom')"])
    result = await SubprocessExecutor().execute(make_request(tool))
    assert not result.ok and result.error.type == "tool_error"
    assert "boom" in result.stderr and result.data["stdout"] == "partial\n"


async def test_missing_program_is_a_tool_error(make_tool, make_request):
    result = await SubprocessExecutor().execute(make_request(_tool(make_tool, ["/nonexistent/prog"])))
    assert not result.ok and result.error.type == "tool_error"


# -- output caps never cut a secret in half; option injection; deep JSON; tenant sandboxes -----

B64_SECRET = base64.b64encode(SECRET.encode()).decode()
ECHO_AFTER_PAD = ("import base64, os, sys; token = os.environ['API_TOKEN']; form = sys.argv[2]\n"
                  "token = base64.b64encode(token.encode()).decode() if form == 'b64' else token\n"
                  "out = sys.stdout if sys.argv[3] == 'stdout' else sys.stderr\n"
                  "out.write(sys.argv[1] + token + ' and more'); out.flush(); sys.exit(sys.argv[3] == 'stderr')")


def _shown(obs) -> str:
    """Everything of an observation an agent reads."""
    return json.dumps([obs.data, obs.summary, obs.error and obs.error.message], ensure_ascii=False)


def _prefixes(text: str, secret: str) -> list[str]:
    return [secret[:k] for k in range(4, len(secret) + 1) if secret[:k] in text]


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
@pytest.mark.parametrize("form, secret_form", [("raw", SECRET), ("b64", B64_SECRET)])
@pytest.mark.parametrize("inside", [4, 20, -3, -1])
async def test_a_secret_crossing_the_output_cap_is_never_cut_in_half(make_tool, make_request, stream, form,
                                                                   secret_form, inside):
    """The agent picks the padding, so it picks where the cap lands inside the echoed secret."""
    cap = 200
    pad = "x" * (cap - (inside % len(secret_form)))
    tool = _tool(make_tool, [PY, "-c", ECHO_AFTER_PAD, "{pad}", form, stream],
                 executor_extra={"options": {"max_output_bytes": cap}})
    creds = ResolvedCredentials(env={"API_TOKEN": SECRET}, secret_values=frozenset({SECRET}))
    result = await SubprocessExecutor().execute(make_request(tool, {"pad": pad}, credentials=creds))
    assert result.meta["truncated"] is True
    assert len((result.data["stdout"] if stream == "stdout" else result.stderr).encode()) <= cap
    shown = _shown(normalize(call_context(tool, credentials=creds), result, 1, 64 * 1024))
    assert pad[:100] in shown  # the output itself is there
    assert _prefixes(shown, secret_form) == [] and _prefixes(shown, SECRET) == []


@pytest.mark.parametrize("argv, args", [
    (["echo", "{a}{b}"], {"a": "", "b": "--upload-pack=touch pwned"}),
    (["echo", "{a}{b}{c}"], {"a": "", "b": "", "c": "-rf"}),
    (["head", "{a}{b}", "notes.txt"], {"a": "", "b": -5}),
])
async def test_an_element_starting_with_a_dash_is_refused_however_placeholders_combine(make_tool, make_request,
                                                                                      argv, args):
    tool = _tool(make_tool, argv)
    result = await SubprocessExecutor().execute(make_request(tool, args))
    assert not result.ok and result.error.type == "tool_error" and "may not start with '-'" in result.error.message


async def test_a_dash_the_template_itself_begins_with_is_allowed(make_tool, make_request):
    tool = _tool(make_tool, [PY, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", "-{a}{b}", "x{c}"],
                 executor_extra={"options": {"output": "json"}})
    result = await SubprocessExecutor().execute(make_request(tool, {"a": "", "b": "v", "c": "-n"}))
    assert result.ok and result.data == ["-v", "x-n"]


async def test_json_stdout_nested_too_deeply_is_a_tool_error(make_tool, make_request):
    tool = _tool(make_tool, [PY, "-c", "print('[' * 100000 + ']' * 100000)"],
                 executor_extra={"options": {"output": "json"}})
    result = await SubprocessExecutor().execute(make_request(tool))
    assert not result.ok and result.error.type == "tool_error" and "nested too deeply" in result.error.message


CACHING_CLI = ("import os, pathlib; rc = pathlib.Path.home() / '.toolrc'\n"
               "print('cached:', rc.read_text() if rc.exists() else '<none>', 'home:', os.environ['HOME'])\n"
               "rc.exists() or rc.write_text('token=' + os.environ['API_TOKEN'])")


async def test_each_tenant_has_its_own_sandbox_and_home(tmp_path, make_tool):
    """A CLI caching its login in HOME: what one tenant's call leaves there the next tenant's never sees."""
    tool = make_tool("cli", executor={"kind": "subprocess", "argv": [PY, "-c", CACHING_CLI]})
    stage = ExecuteStage(ExecutorRegistry(executor_factories()), tmp_path / "sandbox")
    seen = {}
    for tenant, token in (("acme", "acme-only-token-AAAAAAAA"), ("globex", "globex-only-token-BBBBBBBB"),
                          ("acme", "acme-only-token-AAAAAAAA")):
        creds = ResolvedCredentials(env={"API_TOKEN": token}, secret_values=frozenset({token}))
        result, _ = await stage.run(call_context(tool, tenant, credentials=creds))
        assert result.ok, result
        seen.setdefault(tenant, []).append(result.data["stdout"])
    assert seen["globex"][0].startswith("cached: <none>")
    assert "acme-only" not in seen["globex"][0]
    assert seen["acme"][1].startswith("cached: token=acme-only-token")  # a tenant keeps its own state
    home = seen["globex"][0].split("home: ")[1].strip()
    assert home == str((tmp_path / "sandbox" / "cli" / "globex").resolve())


@pytest.mark.parametrize("tenants", [
    ["..", ".", "", "%", "%25", "%2E%2E"],
    ["a/b", "a%2Fb", "a_b", "a-b", "A-B"],
    ["x" * 300, "x" * 301, "é", "%C3%A9"],
])
def test_tenant_folders_are_single_distinct_path_components(tmp_path, tenants):
    folders = [tenant_folder(t) for t in tenants]
    assert len(set(folders)) == len(folders)
    for folder in folders:
        assert folder not in ("", ".", "..") and "/" not in folder and len(folder) <= 130
        assert (tmp_path / folder).resolve().parent == tmp_path.resolve()


def test_a_placeholder_with_a_final_newline_is_unsupported():
    from gateway.executors.subprocess import ArgvError, build_argv

    with pytest.raises(ArgvError, match="unsupported placeholder"):
        build_argv(["echo", "{path\n}"], {"path\n": "x", "path": "y"}, {}, allow_dash=False)
