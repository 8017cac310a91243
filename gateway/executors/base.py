"""The executor protocol and the registry that picks one per tool."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

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
    """A folder private to this tool (created on first use)."""
    credentials: Any = None
    """gateway.credentials.ResolvedCredentials: injected values the executor places."""


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


class Executor(Protocol):
    async def execute(self, request: ExecRequest) -> ExecResult: ...


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
