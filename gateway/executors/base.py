"""The executor protocol and the registry that picks one per tool."""

from __future__ import annotations

import hashlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, TypeVar

import rfc8785

from gateway.codes import Code
from gateway.config import ToolConfig
from gateway.models import ErrorInfo


@dataclass(frozen=True, slots=True)
class ExecRequest:
    tool: ToolConfig
    args: Mapping[str, Any]
    constraints: Mapping[str, Any]
    """Descriptor constraints narrowed by the policy decision's constraints."""
    tenant: str
    decision_id: str
    timeout: float
    sandbox: Path
    """A folder private to this tool, ``<sandbox root>/<tool>`` (created on first use), shared by
    tenants: python tools are gateway code. Tools running foreign code use ``tenant_sandbox``."""
    credentials: Any = None
    """gateway.credentials.ResolvedCredentials: injected values the executor places."""
    linger: Callable[[Future[Any]], None] | None = None
    """Set by the execute stage: an executor hands it work it starts but cannot stop (a Python
    thread). Until that work is done the call keeps its concurrency slot and no retry starts."""

    @property
    def tenant_sandbox(self) -> Path:
        """This tenant's own folder inside the tool's sandbox: ``<sandbox>/<tenant folder>``
        (``tenant_folder``). Subprocess tools run in it and it holds their HOME."""
        return self.sandbox / tenant_folder(self.tenant)


_E = TypeVar("_E", bound=BaseException)


def exception_in(exc: BaseException, kind: type[_E]) -> _E | None:
    """The ``kind`` exception behind ``exc``: itself, a cause or context, or inside an exception
    group (a client library may wrap an error of the layer below in its own errors), or None."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
    return None


TENANT_FOLDER_CHARS = 128
"""A tenant name longer than this once encoded gets a hashed folder name instead."""


def number_text(value: int | float) -> str:
    """A number as RFC 8785 writes it, which is what was hashed and shown to the approver:
    ``1e20`` is ``100000000000000000000``, not Python's ``1e+20``; ``1e-7`` is ``1e-7``."""
    return str(value) if type(value) is int else rfc8785.dumps(value).decode()


def tenant_folder(tenant: str) -> str:
    """``tenant`` as one path component, one-to-one: ASCII letters, digits, ``_`` and ``-`` stay;
    every other byte (``.``, ``/`` and ``%`` too) becomes ``%XX``, so the result is never ``.``,
    ``..`` or a path. The empty name is ``%``; a long one ``%%`` + its sha256 (hex)."""
    if not tenant:
        return "%"
    encoded = "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_-") else f"%{b:02X}"
                      for b in tenant.encode("utf-8", errors="surrogatepass"))
    if len(encoded) > TENANT_FOLDER_CHARS:
        return "%%" + hashlib.sha256(tenant.encode("utf-8", errors="surrogatepass")).hexdigest()
    return encoded


@dataclass(frozen=True, slots=True)
class ExecResult:
    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    stderr: str = ""
    attempts: int = 1
    meta: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def failure(cls, type_: str, message: str, *, retryable: bool = False, **kw: Any) -> "ExecResult":
        return cls(ok=False, error=ErrorInfo(type=type_, message=message, retryable=retryable), **kw)


def unconfined_egress(request: ExecRequest) -> ExecResult | None:
    """``egress_denied`` for a call whose egress is narrowed to hosts (``constraints.hosts``, the
    descriptor's and the policy's, or its credentials' hosts) from an executor that starts a process,
    which cannot be held to them; None when the call names no hosts. The executors' own backstop to
    ``ExecuteStage.cannot_run``, which refuses such a call before it is admitted: a narrowing
    that cannot be enforced is refused, never ignored."""
    if request.constraints.get("hosts") is None and getattr(request.credentials, "hosts", None) is None:
        return None
    return ExecResult.failure(Code.EGRESS_DENIED.value, unconfined_message(process_name(request.tool)))


def unconfined_message(process: str) -> str:
    """Why a call narrowed to hosts is refused when ``process`` cannot be held to them."""
    return (f"this call may reach only the hosts its policy allows, and {process} cannot be confined to "
            "hosts, so it was not started; a tool that must be narrowed to hosts runs with the http "
            "executor (or an http MCP upstream)")


def process_name(tool: ToolConfig) -> str:
    """What runs ``tool``, as ``unconfined_message`` names it."""
    ex = tool.executor
    if ex.kind == "subprocess":
        return "a subprocess"
    if ex.kind == "mcp":
        return f"the stdio MCP upstream {ex.server}"  # an HTTP one confines (McpExecutor.confines_hosts)
    return f"the {ex.kind} executor"


class Executor(Protocol):
    async def execute(self, request: ExecRequest) -> ExecResult: ...

    def confines_hosts(self, tool: ToolConfig) -> bool:
        """Whether a call of ``tool`` can be held to the hosts its constraints narrow it to. An
        executor without this method cannot (``holds_to_hosts``): its narrowed calls are refused."""
        ...

    def honours_constraints(self, tool: ToolConfig) -> bool:
        """Whether ``tool`` honours every constraint key it is handed (beyond ``hosts`` and
        ``credential_variant``, which the gateway enforces itself). An executor without this
        method does not (``honours_constraints``): a decision setting another key is refused."""
        ...


def honours_constraints(executor: object, tool: ToolConfig) -> bool:
    """``executor.honours_constraints(tool)``: whether the tool is handed its effective
    constraints and trusted to honour every key of them (a python tool, gateway code); False for
    an executor that does not say (fail closed: a key nothing enforces is refused, not ignored)."""
    honours = getattr(executor, "honours_constraints", None)
    return bool(honours(tool)) if callable(honours) else False


def holds_to_hosts(executor: object, tool: ToolConfig) -> bool:
    """``executor.confines_hosts(tool)``; False for an executor that does not say (fail closed)."""
    confines = getattr(executor, "confines_hosts", None)
    return bool(confines(tool)) if callable(confines) else False


class ExecutorRegistry:
    """Builds (lazily) and caches one executor per executor kind."""

    def __init__(self, factories: Mapping[str, Any]) -> None:
        self._factories = dict(factories)
        self._instances: dict[str, Executor] = {}

    def for_tool(self, tool: ToolConfig) -> Executor:
        kind = tool.executor.kind
        if kind not in self._instances:
            factory = self._factories.get(kind)
            if factory is None:
                raise LookupError(f"no executor for kind {kind!r}")
            self._instances[kind] = factory()
        return self._instances[kind]

    async def close(self) -> None:
        for executor in self._instances.values():
            close = getattr(executor, "close", None)
            if close is not None:
                await close()
