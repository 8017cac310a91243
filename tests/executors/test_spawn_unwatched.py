"""A process asyncio started but could not register with its child watcher (Python 3.11's thread
watcher failing to start its thread: "can't start new thread") is killed and reaped, never left to
run on past every timeout; the call fails as one a later attempt may get through."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from gateway.executors.mcp import McpExecutor, parse_upstreams
from gateway.executors.subprocess import SubprocessExecutor

LONG_SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def no_watcher_thread(monkeypatch):
    """The child watcher's thread cannot start (fault injected: the thread limit is outside the
    system under test); the pids it was asked to watch are collected."""
    pids: list[int] = []
    start = threading.Thread.start

    def refusing_start(thread: threading.Thread) -> None:
        if thread.name.startswith("asyncio-waitpid-"):
            pids.append(thread._args[1])  # type: ignore[attr-defined]  # (loop, pid, callback, args)
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refusing_start)
    if hasattr(os, "pidfd_open"):  # a loop that watches with pidfds instead (Python 3.12+) fails the same way
        monkeypatch.setattr(os, "pidfd_open", _no_pidfd)
    yield pids
    for pid in pids:  # whatever the code under test left running
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _no_pidfd(pid: int, flags: int = 0) -> int:
    raise OSError(24, "Too many open files")


def _gone(pid: int) -> bool:
    """Neither running nor a zombie of ours: killed and reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_an_unwatched_subprocess_is_killed_and_reaped(make_tool, make_request, tmp_path, no_watcher_thread):
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": [sys.executable, "-c", LONG_SLEEP]})
    (tmp_path / "sandbox" / "cmd").mkdir(parents=True)
    result = await SubprocessExecutor().execute(make_request(tool))
    assert len(no_watcher_thread) == 1 and _gone(no_watcher_thread[0]), "the started process still runs"
    assert not result.ok and result.error.type == "tool_error" and result.error.retryable, result
    assert "could not be watched" in result.error.message and "can't start new thread" in result.error.message


async def test_an_unwatched_stdio_mcp_upstream_is_killed_and_reaped(make_tool, make_request, no_watcher_thread):
    executor = McpExecutor(parse_upstreams({"notes": {"transport": "stdio", "command": sys.executable,
                                                      "args": ["-c", LONG_SLEEP]}}))
    tool = make_tool("notes_add", executor={"kind": "mcp", "server": "notes", "remote_tool": "add"})
    result = await executor.execute(make_request(tool, {"a": 1, "b": 2}))
    assert len(no_watcher_thread) == 1 and _gone(no_watcher_thread[0]), "the started upstream still runs"
    assert not result.ok and result.error.type == "tool_error" and result.error.retryable, result
    assert "could not be watched" in result.error.message, result


async def test_a_command_that_never_started_is_not_waited_for(make_tool, make_request, no_watcher_thread):
    """No process, nothing to kill: a missing command is still the plain, not retryable failure."""
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": ["/nonexistent/prog"]})
    result = await SubprocessExecutor().execute(make_request(tool))
    assert not result.ok and not result.error.retryable and "/nonexistent/prog" in result.error.message
    assert no_watcher_thread == []


async def test_a_script_without_an_interpreter_line_is_named_as_such(make_tool, make_request, tmp_path):
    """ENOEXEC (real: an executable file with no '#!' line) says what the file lacks, for a
    subprocess tool and a stdio MCP upstream alike; no retry helps."""
    script = tmp_path / "no-shebang"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": [str(script)]})
    (tmp_path / "sandbox" / "cmd").mkdir(parents=True)
    result = await SubprocessExecutor().execute(make_request(tool))
    assert not result.ok and not result.error.retryable, result
    assert "Exec format error (a script needs a first line '#!' naming its interpreter)" in result.error.message
    executor = McpExecutor(parse_upstreams({"notes": {"transport": "stdio", "command": str(script)}}))
    tool = make_tool("notes_add", executor={"kind": "mcp", "server": "notes", "remote_tool": "add"})
    result = await executor.execute(make_request(tool, {"a": 1, "b": 2}))
    assert not result.ok and not result.error.retryable, result
    assert "a script needs a first line '#!'" in result.error.message, result
