"""Run a command from an argv template: no shell, ever.

- ``argv`` elements may hold ``{name}`` placeholders, each filled from one argument; the
  result stays one argv element however many spaces or quotes the value holds. ``argv[0]``
  must be literal. Only scalar arguments fill placeholders; a filled element that starts with
  ``-`` where the template's own text does not is refused (option injection, however the
  placeholders combine) unless ``options.allow_dash_values``.
  ``{file:label}`` is replaced by the path of the file credential ``label``.
- The child gets a clean environment: ``PATH``, ``LANG``, ``HOME`` (= its working folder),
  the descriptor's ``env`` and the env credentials — nothing from the gateway's environment.
- It runs in the calling tenant's own folder of the tool's sandbox (``ExecRequest.tenant_sandbox``;
  ``cwd`` from the descriptor is relative to it and never outside it), so what one tenant's
  call leaves in its working folder or HOME (a CLI's cached login) no other tenant's call sees.
  It runs in a new session; stdin is closed; stdout and stderr are capped
  (``options.max_output_bytes``, default 1 MiB each; the rest is drained and dropped), the cut
  never splitting one of the call's secrets (``gateway.executors.capture``).
- A call narrowed to hosts (``constraints.hosts``, the descriptor's or the policy's) is refused
  ``egress_denied`` before anything starts: a process cannot be held to hosts, and a narrowing
  that cannot be enforced is never ignored (a descriptor with ``constraints.hosts`` is refused at
  load).
- At the timeout the whole process group is killed (SIGKILL) — children too; the result is
  ``tool_timeout`` (error type ``timeout``). The call ends when the tool's process exits, even
  while a child it left still holds its output; any process left in the group is then killed
  as well (one that left the group gets a bounded wait for the output, no more).
- A process asyncio started but could not hand to its child watcher (no thread or descriptor
  left for it) is killed with its group and reaped at once (``start_process``): a retryable
  ``tool_error``, never a process running on unwatched.
- ``options.output: json`` parses stdout as JSON (stdout that is not JSON, or nested too deeply
  to parse, is a ``tool_error``); otherwise data is ``{"exit_code", "stdout"}``. A non-zero exit
  is a ``tool_error`` carrying stdout and stderr.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import signal
import string
import time
from pathlib import Path
from typing import Any, Mapping

from gateway.codes import Code
from gateway.credentials import credential_files
from gateway.executors.base import ExecRequest, ExecResult, number_text, unconfined_egress
from gateway.executors.capture import CappedOutput, finish_readers
from gateway.executors.options import SubprocessOptions

CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
_PLACEHOLDER = re.compile(r"^(?:file:)?[A-Za-z_][A-Za-z0-9_]*\Z")


class ArgvError(ValueError):
    """The argv template or an argument cannot be turned into a safe argv."""


def build_argv(template: list[str], args: Mapping[str, Any], files: Mapping[str, str], *, allow_dash: bool) -> list[str]:
    if not template:
        raise ArgvError("argv template is empty")
    if "{" in template[0] or "}" in template[0]:
        raise ArgvError("argv[0] must be literal")
    return [template[0]] + [_fill(item, args, files, allow_dash) for item in template[1:]]


def _fill(item: str, args: Mapping[str, Any], files: Mapping[str, str], allow_dash: bool) -> str:
    out: list[str] = []
    filled: list[tuple[str, str]] = []  # (placeholder, value) in order
    for literal, field, spec, conv in string.Formatter().parse(item):
        out.append(literal)
        if field is None:
            continue
        if field == "file" and spec:  # ``{file:label}`` parses as field "file", spec "label"
            field, spec = f"file:{spec}", ""
        if spec or conv or not _PLACEHOLDER.match(field):
            raise ArgvError(f"unsupported placeholder {{{field}}}")
        value = _value(field, args, files)
        out.append(value)
        filled.append((field, value))
    result = "".join(out)
    # the finished element, not each value: "{a}{b}" with a="" still begins with b
    if result.startswith("-") and not (out and out[0].startswith("-")) and not allow_dash:
        field = next(f for f, v in filled if v)
        raise ArgvError(f"argument {field!r} may not start with '-'")
    if "\0" in result:
        raise ArgvError("argument contains a NUL byte")
    return result


def _value(field: str, args: Mapping[str, Any], files: Mapping[str, str]) -> str:
    if field.startswith("file:"):
        label = field[5:]
        if label not in files:
            raise ArgvError(f"no file credential {label!r}")
        return files[label]
    if field not in args:
        raise ArgvError(f"missing argument {field!r}")
    value = args[field]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return number_text(value)
    raise ArgvError(f"argument {field!r} must be a string, number or boolean")


def sandbox_cwd(sandbox: Path, cwd: str) -> Path:
    """The working folder: ``cwd`` relative to the sandbox, which it may not leave."""
    root = sandbox.resolve()
    root.mkdir(parents=True, exist_ok=True)
    target = (root / cwd).resolve() if cwd else root
    if target != root and root not in target.parents:
        raise ArgvError("cwd escapes the sandbox")
    target.mkdir(parents=True, exist_ok=True)
    return target


def child_env(home: Path, fixed: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    return {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "HOME": str(home), **fixed, **secrets}


class SubprocessExecutor:
    enforces_timeout = True
    """Stops at ``request.timeout`` itself (and cleans up)."""

    @staticmethod
    def confines_hosts(tool: Any) -> bool:
        """A process can reach any host."""
        return False

    async def execute(self, request: ExecRequest) -> ExecResult:
        if (refused := unconfined_egress(request)) is not None:
            return refused
        ex = request.tool.executor
        options = ex.options
        if not isinstance(options, SubprocessOptions):  # the config types them per kind: a bug, not a config error
            raise TypeError(f"tool {request.tool.name}: executor.options are not the subprocess executor's")
        creds = request.credentials
        async with credential_files(creds) as files:
            try:
                argv = build_argv(ex.argv, request.args, files, allow_dash=options.allow_dash_values)
                cwd = sandbox_cwd(request.tenant_sandbox, ex.cwd)
            except ArgvError as exc:
                return ExecResult.failure(Code.TOOL_ERROR.value, str(exc))
            env = child_env(cwd, ex.env, dict(creds.env) if creds is not None else {})
            cap = options.max_output_bytes
            secrets = creds.secret_values if creds is not None else ()
            out, err = CappedOutput(cap, secrets), CappedOutput(cap, secrets)
            return await _run(argv, cwd, env, (out, err), request.timeout, options.output == "json")


MAX_ARG_BYTES = 32 * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 128 * 1024
"""Linux's limit on one argument or environment string (MAX_ARG_STRLEN: 32 pages), whatever ``ulimit -s`` is."""
SHORT_OF_RESOURCES = frozenset({errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
"""Start failures that say the gateway ran short (processes, open files, memory), not what it starts."""


class SpawnFailed(Exception):
    """A process could not be started: ``path`` (its command, or its working folder) is missing
    or may not be run, as ``why`` says, and starting it again cannot help; or, when ``too_long``,
    its arguments and environment together are more than the system takes (E2BIG), nothing to do
    with its path; or, when ``transient``, the gateway was short of processes, open files or
    memory, and a later attempt may succeed."""

    def __init__(self, command: str, error: OSError) -> None:
        self.command = command
        self.transient = error.errno in SHORT_OF_RESOURCES
        self.too_long = error.errno == errno.E2BIG
        self.path = command if self.transient or self.too_long else str(error.filename or command)
        self.why = error.strerror or type(error).__name__
        if error.errno == errno.ENOEXEC:  # an executable file the kernel cannot run: a script, usually
            self.why += " (a script needs a first line '#!' naming its interpreter)"
        if self.transient:
            message = (f"cannot start {command!r} now: {self.why} (the gateway is short of processes, open files or "
                       "memory); a later attempt may succeed")
        elif self.too_long:
            message = (f"cannot start {command!r}: its arguments and environment are longer than the system takes "
                       f"({self.why}; one argument may be at most {MAX_ARG_BYTES // 1024} KiB on Linux)")
        else:
            message = f"cannot start {command!r}: {self.path!r}: {self.why}"
        super().__init__(message)


class ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol, plus ``exited``: set when the process exits, whoever still holds
    its pipes. (``Process.wait`` returns only once every pipe has closed too, which a child left
    running in the background delays to the kill, and one that left the group for ever.)"""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()
        self.transport: asyncio.SubprocessTransport | None = None
        """The process's transport, once asyncio has connected its pipes."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport = transport  # type: ignore[assignment]

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


_CONNECT_TICKS = 50
"""Loop iterations asyncio needs at most to connect a started process's pipes (a handful: each
pipe's connection is a couple of ``call_soon``s, no I/O), after which its protocol knows it."""
_REAP_SECONDS = 5.0


async def start_process(argv: list[str], limit: int, **kwargs: Any) -> tuple[asyncio.SubprocessTransport, ExitProtocol]:
    """``loop.subprocess_exec`` with an ``ExitProtocol``; raises ``SpawnFailed`` instead of ``OSError``.

    asyncio forks before it registers the child with its watcher; when that fails (Python 3.11's
    thread watcher cannot start its thread: ``RuntimeError``; a pidfd watcher's ``pidfd_open``
    runs out of descriptors: ``OSError``) the started process would run on unwatched, past every
    timeout, and never be reaped. Whatever was started then is killed (its group too) and reaped
    here, and the failure is a transient ``SpawnFailed``.
    """
    loop = asyncio.get_running_loop()
    protocol = ExitProtocol(limit, loop)
    try:
        transport, _ = await loop.subprocess_exec(lambda: protocol, *argv, **kwargs)
    except (OSError, RuntimeError) as exc:  # RuntimeError: "can't start new thread", after the fork
        if await _stop_unwatched(protocol):
            unwatched = OSError(errno.EAGAIN, f"it started but could not be watched ({exc}), so it was killed")
            raise SpawnFailed(argv[0], unwatched) from exc
        if isinstance(exc, OSError):
            raise SpawnFailed(argv[0], exc) from exc
        raise
    return transport, protocol  # type: ignore[return-value]


async def _stop_unwatched(protocol: ExitProtocol) -> bool:
    """Kill and reap the process a failed start left behind, if one was started; whether one was."""
    for _ in range(_CONNECT_TICKS):
        if protocol.transport is not None:
            break
        await asyncio.sleep(0)
    else:
        return False  # nothing was started (the fork or exec failed): no pipes were ever connected
    transport = protocol.transport
    pid = transport.get_pid()
    kill_group(pid)  # started in its own session: its group id is its pid
    transport.close()  # its pipes; SIGKILL to the process itself if it is still there
    deadline = time.monotonic() + _REAP_SECONDS
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:  # reaped already (the transport's close polls it)
            break
        await asyncio.sleep(0.01)
    return True


async def _run(argv: list[str], cwd: Path, env: dict[str, str], outputs: tuple[CappedOutput, CappedOutput],
               timeout: float, as_json: bool) -> ExecResult:
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await start_process(
            argv, 2 ** 16, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
    except SpawnFailed as spawn:
        return ExecResult.failure(Code.TOOL_ERROR.value, str(spawn), retryable=spawn.transient)
    proc = asyncio.subprocess.Process(transport, protocol, loop)
    out, err = outputs
    readers = [asyncio.ensure_future(out.drain(proc.stdout)), asyncio.ensure_future(err.drain(proc.stderr))]
    try:
        try:
            await asyncio.wait_for(protocol.exited.wait(), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            kill_group(proc.pid)
            await protocol.exited.wait()  # SIGKILL: at once
            await finish_readers(readers)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ExecResult.failure(
                "timeout", f"killed after {timeout:g}s", retryable=True, stderr=err.text(),
            )
        kill_group(proc.pid)  # whatever the tool left running in its group
        await finish_readers(readers)
        meta = {"exit_code": proc.returncode, "truncated": out.truncated or err.truncated}
        return _result(proc.returncode or 0, out.text(), err.text(), meta, as_json)
    finally:
        transport.close()  # the pipes, also those a process outside the group still holds


def _result(code: int, stdout: str, stderr: str, meta: dict[str, Any], as_json: bool) -> ExecResult:
    if code != 0:
        return ExecResult.failure(
            Code.TOOL_ERROR.value, f"exit code {code}", data={"exit_code": code, "stdout": stdout},
            stderr=stderr, meta=meta,
        )
    if not as_json:
        return ExecResult(ok=True, data={"exit_code": 0, "stdout": stdout}, stderr=stderr, meta=meta)
    try:
        return ExecResult(ok=True, data=json.loads(stdout), stderr=stderr, meta=meta)
    except ValueError:
        problem = "stdout is not JSON"
    except RecursionError:
        problem = "stdout is JSON nested too deeply to read"
    return ExecResult.failure(Code.TOOL_ERROR.value, problem, data={"stdout": stdout}, stderr=stderr, meta=meta)


def kill_group(pgid: int) -> None:
    """SIGKILL every process in group ``pgid`` (a tool started in its own session), if any are left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
