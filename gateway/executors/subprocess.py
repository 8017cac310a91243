"""Run a command from an argv template: no shell, ever.

- ``argv`` elements may hold ``{name}`` placeholders, each filled from one argument; the
  result stays one argv element however many spaces or quotes the value holds. ``argv[0]``
  must be literal. Only scalar arguments fill placeholders; a value starting with ``-`` is
  refused where it would begin an element (option injection) unless ``options.allow_dash_values``.
  ``{file:label}`` is replaced by the path of the file credential ``label``.
- The child gets a clean environment: ``PATH``, ``LANG``, ``HOME`` (= its working folder),
  the descriptor's ``env`` and the env credentials — nothing from the gateway's environment.
- It runs in the tool's sandbox folder (``cwd`` from the descriptor, relative to it and never
  outside it), in a new session; stdin is closed; stdout and stderr are capped
  (``options.max_output_bytes``, default 1 MiB each; the rest is drained and dropped).
- At the timeout the whole process group is killed (SIGKILL) — children too; the result is
  ``tool_timeout`` (error type ``timeout``). After a normal exit any process left in the group is killed as well.
- ``options.output: json`` parses stdout as JSON; otherwise data is
  ``{"exit_code", "stdout"}``. A non-zero exit is a ``tool_error`` carrying stdout and stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import string
from pathlib import Path
from typing import Any, Mapping

from gateway.codes import Code
from gateway.credentials import credential_files
from gateway.executors.base import ExecRequest, ExecResult

DEFAULT_MAX_OUTPUT = 1024 * 1024
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
PIPE_GRACE_SECONDS = 2.0
_PLACEHOLDER = re.compile(r"^(?:file:)?[A-Za-z_][A-Za-z0-9_]*$")


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
    for literal, field, spec, conv in string.Formatter().parse(item):
        out.append(literal)
        if field is None:
            continue
        if field == "file" and spec:  # ``{file:label}`` parses as field "file", spec "label"
            field, spec = f"file:{spec}", ""
        if spec or conv or not _PLACEHOLDER.match(field):
            raise ArgvError(f"unsupported placeholder {{{field}}}")
        value = _value(field, args, files)
        if not out[0] and len(out) == 1 and value.startswith("-") and not allow_dash:
            raise ArgvError(f"argument {field!r} may not start with '-'")
        out.append(value)
    result = "".join(out)
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
    if isinstance(value, (str, int, float)):
        return str(value)
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

    async def execute(self, request: ExecRequest) -> ExecResult:
        ex = request.tool.executor
        options = ex.options
        creds = request.credentials
        with credential_files(creds) as files:
            try:
                argv = build_argv(ex.argv, request.args, files, allow_dash=bool(options.get("allow_dash_values")))
                cwd = sandbox_cwd(request.sandbox, ex.cwd)
            except ArgvError as exc:
                return ExecResult.failure(Code.TOOL_ERROR.value, str(exc))
            env = child_env(cwd, ex.env, dict(creds.env) if creds is not None else {})
            cap = int(options.get("max_output_bytes", DEFAULT_MAX_OUTPUT))
            return await _run(argv, cwd, env, cap, request.timeout, options.get("output") == "json")


async def _run(argv: list[str], cwd: Path, env: dict[str, str], cap: int, timeout: float, as_json: bool) -> ExecResult:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
    except OSError as exc:
        return ExecResult.failure(Code.TOOL_ERROR.value, f"cannot start {argv[0]}: {exc.strerror}")
    out, err = _Capped(cap), _Capped(cap)
    readers = [asyncio.ensure_future(out.drain(proc.stdout)), asyncio.ensure_future(err.drain(proc.stderr))]
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        _kill_group(proc.pid)
        await proc.wait()
        await _finish(readers)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return ExecResult.failure(
            "timeout", f"killed after {timeout:g}s", retryable=True, stderr=err.text(),
        )
    _kill_group(proc.pid)  # whatever the tool left running in its group
    await _finish(readers)
    meta = {"exit_code": proc.returncode, "truncated": out.truncated or err.truncated}
    return _result(proc.returncode or 0, out.text(), err.text(), meta, as_json)


async def _finish(readers: list[asyncio.Future[None]]) -> None:
    """Let the readers reach EOF; a process that escaped the group may hold a pipe open: stop waiting."""
    _, pending = await asyncio.wait(readers, timeout=PIPE_GRACE_SECONDS)
    for task in pending:
        task.cancel()


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
        return ExecResult.failure(Code.TOOL_ERROR.value, "stdout is not JSON", data={"stdout": stdout},
                                  stderr=stderr, meta=meta)


class _Capped:
    """Keeps the first ``cap`` bytes of a stream and drops the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            room = self.cap - len(self.buf)
            if len(chunk) > room:
                self.truncated = True
            self.buf += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
