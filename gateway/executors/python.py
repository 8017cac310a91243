"""Run a Python callable named ``module:function`` in the descriptor.

The function is called as ``fn(args, ctx)`` where ``ctx`` is the ``ExecRequest``; it may be
async. A sync function runs in a worker thread so it cannot block the event loop. Its return
value is the observation's data (must be JSON-serialisable); an exception is a tool error.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from typing import Any, Callable

from gateway.executors.base import ExecRequest, ExecResult


class PythonExecutor:
    def __init__(self) -> None:
        self._cache: dict[str, Callable[..., Any]] = {}

    def _load(self, ref: str) -> Callable[..., Any]:
        fn = self._cache.get(ref)
        if fn is None:
            module, _, name = ref.partition(":")
            if not module or not name:
                raise ValueError(f"python executor callable must be 'module:function', got {ref!r}")
            fn = getattr(importlib.import_module(module), name)
            self._cache[ref] = fn
        return fn

    async def execute(self, request: ExecRequest) -> ExecResult:
        fn = self._load(request.tool.executor.callable)
        try:
            if inspect.iscoroutinefunction(fn):
                data = await fn(dict(request.args), request)
            else:
                data = await asyncio.to_thread(fn, dict(request.args), request)
        except ToolFailure as exc:
            return ExecResult.failure(exc.type, str(exc), retryable=exc.retryable)
        except Exception as exc:  # the tool's own failure, reported as data
            return ExecResult.failure(type(exc).__name__, str(exc), retryable=False)
        return ExecResult(ok=True, data=data)


class ToolFailure(Exception):
    """Raised by a python tool to report a typed failure (e.g. ``not_found``)."""

    def __init__(self, type_: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.type = type_
        self.retryable = retryable
