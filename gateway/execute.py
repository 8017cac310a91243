"""The execute stage: admission (rate limits, concurrency), the executor, timeouts, retries.

``admit(ctx)`` runs just before execution: it takes a token from the (tenant, tool) and tenant
buckets and a per-tool concurrency slot, or refuses with ``rate_limited`` (with
``retry_after_seconds``) / ``concurrency_limited`` — a refused call never ran, so no claim is
completed with it. ``run(ctx)`` then executes, holding the slot until it returns — or, when an
executor left work it cannot stop (a sync python tool's thread after its timeout: Python threads
cannot be killed, subprocesses can), until that work ends, so ``max_concurrency`` bounds it too.

Retries: only for retry-safe tools (``idempotent`` or side effect ``none``/``read``), only for
failures the executor marked ``retryable``, up to ``max_attempts``, with exponential backoff
and full jitter; never while a failed attempt's work is still running. A write is attempted
exactly once. Time, sleeping and randomness are parameters so tests neither sleep nor guess.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

from gateway.codes import Code
from gateway.config import ToolConfig
from gateway.executors.base import (
    ExecRequest,
    ExecResult,
    ExecutorRegistry,
    holds_to_hosts,
    honours_constraints,
    process_name,
    unconfined_message,
)
from gateway.models import CallContext, Refused
from gateway.ratelimit import ConcurrencyLimiter, RateLimiter

TIMEOUT_GRACE_SECONDS = 2.0
"""Executors with ``enforces_timeout`` stop at the tool timeout themselves (killing, closing);
the stage's own cut-off comes this much later. Others are cut off at the timeout."""


def effective_constraints(ctx: CallContext) -> dict[str, Any]:
    """The descriptor's constraints, with the policy decision's on top.

    The decision sets a key the descriptor leaves open. A key the descriptor sets stays as the
    descriptor has it: ``null`` never lifts it; ``hosts`` from both is their intersection (in
    the descriptor's order), so policy can take hosts away but never add one; a
    ``credential_variant`` the descriptor pins stays (``""`` would mean the broader default
    credential; a different variant is refused by the credentials stage, see
    ``variant_conflict``); any other value for a key it sets is refused before the call runs
    (``constraint_problem``: which of two values is narrower cannot be told, and a ``root`` of
    ``"."`` would have widened a tool's workspace to the gateway's data folder). ``hosts``
    comes out as a list of names (``host_list``) or None.
    """
    static = ctx.tool.config.constraints
    merged = dict(static)
    for key, value in (getattr(ctx.decision, "constraints", None) or {}).items():
        if value is None and static.get(key) is not None:
            continue
        if key == "hosts" and static.get("hosts") is not None:
            value = _common_hosts(static["hosts"], value)
        elif key == "credential_variant":
            if static.get(key):
                continue
        elif static.get(key) is not None:  # pinned: another value is refused (``constraint_problem``)
            continue
        merged[key] = value
    if merged.get("hosts") is not None:
        merged["hosts"] = host_list(merged["hosts"])
    return merged


def constraint_problem(ctx: CallContext, honours: Callable[[], bool]) -> str | None:
    """Why the decision's constraints cannot be applied as decided; None when they can. Past the
    keys the gateway enforces itself (``hosts``, intersected; ``credential_variant``, see
    ``variant_conflict``) and those set to ``null`` (nothing), a key the descriptor pins may be
    repeated, never changed (which of two values is narrower cannot be told), and a key it leaves
    open may be set only when the tool honours every key it is handed (``honours()``: a python
    tool; a narrowing nothing enforces is refused, never ignored)."""
    static = ctx.tool.config.constraints
    for key, value in (getattr(ctx.decision, "constraints", None) or {}).items():
        if key in _GATEWAY_KEYS or value is None:
            continue
        pinned = static.get(key)
        if pinned is not None and value != pinned:
            return (f"the decision sets constraints.{key} to {_short(value)}, but the tool pins {_short(pinned)}: "
                    "policy may set what a descriptor leaves open, never change what it pins")
        if pinned is None and not honours():
            tool = ctx.tool.config
            return (f"the decision sets constraints.{key}, which {tool.name} leaves open and its "
                    f"{tool.executor.kind} executor does not enforce: a narrowing that cannot be enforced is "
                    "refused, never ignored (the gateway enforces hosts and credential_variant for every tool; a "
                    "python tool is handed every key to honour)")
    return None


_GATEWAY_KEYS = frozenset({"hosts", "credential_variant"})
"""Constraint keys the gateway enforces itself, whatever runs the tool."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def host_list(value: Any) -> list[str]:
    """A ``hosts`` constraint as a list of names: one name as a list of it, a list's names (what
    is not text dropped), anything else no host at all. What policy wrote oddly narrows, never
    widens, and no later step has to read it another way."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [h for h in value if isinstance(h, str)]
    return []


def variant_conflict(ctx: CallContext) -> str | None:
    """Why the decision's ``credential_variant`` cannot be used, when the descriptor pins another.

    Variants are names, not an order: whether policy's ``admin`` is narrower than the
    descriptor's ``read_only`` cannot be told, so the call is refused rather than run with
    either (``""`` and ``null`` leave the pinned variant as it is).
    """
    pinned = ctx.tool.config.constraints.get("credential_variant")
    decided = (getattr(ctx.decision, "constraints", None) or {}).get("credential_variant")
    if pinned and decided not in (None, "", pinned):
        return f"policy asks for credential variant {decided!r} but the tool pins {pinned!r}"
    return None


def _common_hosts(static: Any, decided: Any) -> list[str]:
    allowed = {h.lower() for h in host_list(decided)}
    return [h for h in host_list(static) if h.lower() in allowed]


def retry_safe(tool: ToolConfig) -> bool:
    return tool.idempotent or tool.risk.side_effect in ("none", "read")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_seconds: float = 0.2
    """Delay before the second attempt (before jitter); doubles per attempt."""
    max_seconds: float = 5.0
    """Cap of one delay."""

    def delay(self, attempt: int, rand: float) -> float:
        """Full jitter: uniform in [0, min(max, base * 2^(attempt-1))]; ``attempt`` is the one that failed."""
        return min(self.max_seconds, self.base_seconds * 2 ** (attempt - 1)) * rand


HOLD_MARGIN_SECONDS = 300.0
"""Added to ``longest_hold``: the stages around execution, a slow store, clock skew between hosts."""


def longest_run(tool: Any) -> float:
    """The longest one call can spend running ``tool``: every attempt to its timeout (plus the
    executor's grace) and every back-off at its cap (what ``ListTools`` tells clients to wait)."""
    attempts = tool.max_attempts
    return attempts * (tool.timeout_seconds + TIMEOUT_GRACE_SECONDS) + (attempts - 1) * RetryPolicy().max_seconds


def longest_hold(tool: Any) -> float:
    """The longest a live gateway can hold an execution claim of ``tool``: ``longest_run`` and a
    margin. A claim still running after that belonged to a process that died (``gateway.claims``)."""
    return longest_run(tool) + HOLD_MARGIN_SECONDS


class ExecuteStage:
    def __init__(
        self,
        executors: ExecutorRegistry,
        sandbox_root: Path,
        *,
        store: Any = None,
        tenant_per_minute: int = 0,
        retry: RetryPolicy = RetryPolicy(),
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._executors = executors
        self._sandbox_root = sandbox_root
        self._sandboxes: dict[str, Path] = {}  # tool name -> its sandbox path (a Path join is ~4 µs)
        self._rate = RateLimiter(store, tenant_per_minute=tenant_per_minute) if store is not None else None
        self._slots = ConcurrencyLimiter()
        self._leases: set[str] = set()
        """Decision ids holding a concurrency slot taken by ``admit``."""
        self._lingering: set[asyncio.Future[Any]] = set()
        """Waits for work calls left running; each gives back its call's slot when it ends."""
        self._retry, self._clock, self._sleep, self._rand = retry, clock, sleep, rand

    def cannot_run(self, ctx: CallContext) -> Refused | None:
        """Why a call cannot run as decided: ``policy_invalid_decision`` when the decision changes
        a constraint the descriptor pins or sets one that nothing would enforce
        (``constraint_problem``); ``egress_denied`` when it is
        narrowed to hosts (by its effective constraints, or by its credentials once resolved) and
        its executor cannot hold it to them (``confines_hosts``; an executor that does not say
        cannot). The pipeline asks before it requests an approval, so nobody is asked to approve a
        call that could not run, and ``admit`` asks again."""
        if (problem := constraint_problem(ctx, lambda: self._honours(ctx))) is not None:
            return Refused(Code.POLICY_INVALID_DECISION, (problem,))
        tool = ctx.tool.config
        decided = getattr(ctx.decision, "constraints", None) or {}
        if (tool.constraints.get("hosts") is None and decided.get("hosts") is None
                and getattr(ctx.credentials, "hosts", None) is None):
            return None
        try:
            executor = self._executors.for_tool(tool)
        except LookupError:  # no executor of its kind here: nothing to confine it either
            return Refused(Code.EGRESS_DENIED, (f"no {tool.executor.kind} executor here can confine this call to hosts",))
        if holds_to_hosts(executor, tool):
            return None
        return Refused(Code.EGRESS_DENIED, (unconfined_message(process_name(tool)),))

    def _honours(self, ctx: CallContext) -> bool:
        """Whether the call's executor honours every constraint key (none here to run it: no)."""
        try:
            return honours_constraints(self._executors.for_tool(ctx.tool.config), ctx.tool.config)
        except LookupError:
            return False

    async def admit(self, ctx: CallContext) -> Refused | None:
        """Refuse a call that cannot run as decided (``cannot_run``); else take a rate-limit
        token and a concurrency slot for it, or refuse."""
        if (refused := self.cannot_run(ctx)) is not None:
            return refused
        tool = ctx.tool.config
        if self._rate is not None:
            limited = await self._rate.acquire(ctx.identity.tenant, tool, self._clock())
            if limited is not None:
                return Refused(Code.RATE_LIMITED, (f"rate limit reached for {tool.name}: {limited.limits}",),
                               retry_after_seconds=limited.retry_after)
        if not self._slots.try_acquire(tool):
            return Refused(Code.CONCURRENCY_LIMITED, (f"{tool.name} is at its concurrency limit",))
        self._leases.add(ctx.decision_id)
        return None

    async def run(self, ctx: CallContext) -> tuple[ExecResult, int]:
        """Run the tool (with retries when safe); return the result and its duration in ms."""
        tool = ctx.tool.config
        unstoppable: list[Future[Any]] = []
        request = ExecRequest(
            tool=tool,
            args=ctx.args or {},
            constraints=effective_constraints(ctx),
            tenant=ctx.identity.tenant,
            decision_id=ctx.decision_id,
            timeout=tool.timeout_seconds,
            sandbox=self._sandbox(tool.name),
            credentials=ctx.credentials,
            linger=unstoppable.append,
        )
        started = time.monotonic()
        try:
            result = await self._attempts(request, unstoppable)
        finally:
            self._release(ctx.decision_id, tool, unstoppable)
        return result, int((time.monotonic() - started) * 1000)

    def release(self, ctx: CallContext) -> None:
        """Give back the concurrency slot ``admit`` took for a call that will not run after all (none
        taken, or given back already: nothing)."""
        if ctx.decision_id in self._leases:
            self._release(ctx.decision_id, ctx.tool.config, [])

    def _release(self, decision_id: str, tool: ToolConfig, unstoppable: list[Future[Any]]) -> None:
        """Give back the call's concurrency slot now, or once the work it left running ends."""
        if decision_id not in self._leases:
            return
        self._leases.discard(decision_id)
        running = [f for f in unstoppable if not f.done()]
        if not running:
            self._slots.release(tool)
            return
        waiting = asyncio.gather(*(asyncio.wrap_future(f) for f in running), return_exceptions=True)
        self._lingering.add(waiting)

        def ended(_: asyncio.Future[Any]) -> None:
            self._lingering.discard(waiting)
            self._slots.release(tool)

        waiting.add_done_callback(ended)

    def _sandbox(self, name: str) -> Path:
        path = self._sandboxes.get(name)
        if path is None:
            path = self._sandboxes[name] = self._sandbox_root / name
        return path

    async def _attempts(self, request: ExecRequest, unstoppable: list[Future[Any]]) -> ExecResult:
        tool = request.tool
        limit = tool.max_attempts if retry_safe(tool) else 1
        attempt = 1
        while True:
            result = await self._once(request)
            still_running = any(not f.done() for f in unstoppable)
            if result.ok or attempt >= limit or not (result.error and result.error.retryable) or still_running:
                return result if result.attempts == attempt else dataclasses.replace(result, attempts=attempt)
            await self._sleep(self._retry.delay(attempt, self._rand()))
            attempt += 1

    async def _once(self, request: ExecRequest) -> ExecResult:
        executor = self._executors.for_tool(request.tool)
        grace = TIMEOUT_GRACE_SECONDS if getattr(executor, "enforces_timeout", False) else 0.0
        try:
            async with asyncio.timeout(request.timeout + grace):  # no extra Task per call, unlike wait_for
                return await executor.execute(request)
        except TimeoutError:
            return ExecResult.failure("timeout", f"{request.tool.name} exceeded {request.timeout:g} s", retryable=True)

    async def close(self) -> None:
        await self._executors.close()


def build_execute_stage(config: Any, store: Any) -> ExecuteStage:
    """The execute stage for a Config, with rate-limit buckets in ``store``."""
    return ExecuteStage(
        ExecutorRegistry(executor_factories(config)),
        config.data_path / "sandbox",
        store=store,
        tenant_per_minute=config.limits.tenant_calls_per_minute,
    )


def executor_factories(config: Any = None) -> dict[str, Any]:
    from gateway.executors.http import HttpExecutor
    from gateway.executors.python import PythonExecutor
    from gateway.executors.subprocess import SubprocessExecutor

    limits = getattr(config, "limits", None)
    python = (lambda: PythonExecutor(max_threads=limits.python_threads,
                                     threads_per_tenant=limits.python_threads_per_tenant)) if limits else PythonExecutor
    factories: dict[str, Any] = {"python": python, "subprocess": SubprocessExecutor, "http": HttpExecutor}
    upstreams: Mapping[str, Any] = getattr(config, "mcp_upstreams", None) or {}
    if upstreams:
        from gateway.executors.mcp import McpExecutor

        factories["mcp"] = lambda: McpExecutor.from_config(upstreams, config)
    return factories
