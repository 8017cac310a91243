import json
import os
import sys
import time

import pytest

from gateway.credentials import ResolvedCredentials
from gateway.executors.subprocess import SubprocessExecutor

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
    assert result.data["stdout"].strip() == str((request.sandbox / "work").resolve())
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
