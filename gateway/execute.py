"""The execute stage: pick the executor, apply the timeout, report attempts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Mapping

from gateway.executors.base import ExecRequest, ExecResult, ExecutorRegistry
from gateway.models import CallContext


def effective_constraints(ctx: CallContext) -> dict[str, Any]:
    """The descriptor's constraints, narrowed (overridden) by the policy decision's."""
    merged = dict(ctx.tool.config.constraints)
    decision = getattr(ctx.decision, "constraints", None) or {}
    merged.update(decision)
    return merged


class ExecuteStage:
    def __init__(self, executors: ExecutorRegistry, sandbox_root: Path) -> None:
        self._executors = executors
        self._sandbox_root = sandbox_root

    async def run(self, ctx: CallContext) -> tuple[ExecResult, int]:
        """Run the tool once; return the result and its duration in ms."""
        tool = ctx.tool.config
        request = ExecRequest(
            tool=tool,
            args=ctx.args or {},
            constraints=effective_constraints(ctx),
            tenant=ctx.identity.tenant,
            decision_id=ctx.decision_id,
            timeout=tool.timeout_seconds,
            sandbox=self._sandbox_root / tool.name,
            credentials=ctx.credentials,
        )
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(
                self._executors.for_tool(tool).execute(request), timeout=tool.timeout_seconds
            )
        except asyncio.TimeoutError:
            result = ExecResult.failure("timeout", f"{tool.name} exceeded {tool.timeout_seconds:g} s", retryable=True)
        return result, int((time.monotonic() - started) * 1000)

    async def close(self) -> None:
        await self._executors.close()


def executor_factories(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    from gateway.executors.python import PythonExecutor

    return {"python": PythonExecutor}
