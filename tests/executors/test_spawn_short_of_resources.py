"""A process the gateway could not start for want of open files is a retryable failure; a missing
command stays a failure no retry can help (tests/executors/test_mcp.py has those cases), and so do
arguments longer than the system takes, which are named as such."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import sys

from gateway.executors.mcp import McpExecutor, parse_upstreams
from gateway.executors.subprocess import SubprocessExecutor


TOO_LONG = 32 * os.sysconf("SC_PAGE_SIZE") + 1
"""One argument longer than Linux takes (MAX_ARG_STRLEN: 32 pages, 128 KiB with 4 KiB pages)."""


@contextlib.contextmanager
def _no_more_files():
    """No descriptor left: the soft limit lowered near what is open, and every free number below it
    (the limit caps numbers, not the count: there may be gaps) taken, so the next pipe fails with
    EMFILE (real)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    taken = []
    try:
        while True:
            try:
                taken.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE, exc
                break
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_subprocess_not_started_for_want_of_files_is_retryable(make_tool, make_request, tmp_path):
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": [sys.executable, "-c", "print(1)"]})
    request = make_request(tool)
    (tmp_path / "sandbox" / "cmd").mkdir(parents=True)
    with _no_more_files():
        result = await SubprocessExecutor().execute(request)
    assert not result.ok and result.error.type == "tool_error" and result.error.retryable, result
    assert "Too many open files" in result.error.message and "later attempt" in result.error.message
    again = await SubprocessExecutor().execute(request)  # with files to spare it runs
    assert again.ok, again


async def test_a_missing_command_is_still_not_retryable(make_tool, make_request):
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": ["/nonexistent/prog"]})
    result = await SubprocessExecutor().execute(make_request(tool))
    assert not result.ok and not result.error.retryable and "/nonexistent/prog" in result.error.message


async def test_a_stdio_mcp_upstream_not_started_for_want_of_files_is_retryable(make_tool, make_request):
    executor = McpExecutor(parse_upstreams({"notes": {"transport": "stdio", "command": sys.executable,
                                                      "args": ["-c", "pass"]}}))
    tool = make_tool("notes_add", executor={"kind": "mcp", "server": "notes", "remote_tool": "add"})
    with _no_more_files():
        result = await executor.execute(make_request(tool, {"a": 1, "b": 2}))
    assert not result.ok and result.error.type == "tool_error" and result.error.retryable, result
    assert "could not be started now: Too many open files" in result.error.message


async def test_arguments_too_long_for_the_system_are_named_not_the_command(make_tool, make_request, tmp_path):
    """E2BIG (real: one argument over Linux's limit of 32 pages) is about the arguments the call
    filled in, not a command that is missing or may not be run; no retry helps."""
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": [sys.executable, "-c", "pass", "{text}"]})
    result = await SubprocessExecutor().execute(make_request(tool, {"text": "x" * TOO_LONG}))
    assert not result.ok and result.error.type == "tool_error" and not result.error.retryable, result
    assert "its arguments and environment are longer than the system takes" in result.error.message, result
    assert "Argument list too long" in result.error.message


async def test_a_stdio_mcp_upstream_whose_args_are_too_long_says_so(make_tool, make_request):
    executor = McpExecutor(parse_upstreams({"notes": {"transport": "stdio", "command": sys.executable,
                                                      "args": ["-c", "pass", "x" * TOO_LONG]}}))
    tool = make_tool("notes_add", executor={"kind": "mcp", "server": "notes", "remote_tool": "add"})
    result = await executor.execute(make_request(tool, {"a": 1, "b": 2}))
    assert not result.ok and not result.error.retryable, result
    assert "mcp_upstreams.notes.args and its environment (.env, credentials) are longer" in result.error.message
    assert "must exist and be an executable program" not in result.error.message
