"""Rate limits (token buckets in the store) and per-tool concurrency caps.

- Per (tenant, tool): ``ToolConfig.rate_limit_per_minute`` tokens, refilled continuously.
- Per tenant: ``tenant_per_minute`` over all tools (0 = unlimited).

Both buckets are taken in one store transaction, all or nothing, so a call refused by the
tenant bucket does not spend the tool's token. Buckets live in the store so replicas sharing
it share the limits. Time is a parameter (``now``); nothing here sleeps.

Concurrency is a process-local cap (``ToolConfig.max_concurrency``): a call over it is refused
at once with ``concurrency_limited`` rather than queued, so a slow tool cannot pile up work.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from gateway.config import ToolConfig
from gateway.store.base import BucketSpec, Store


@dataclass(frozen=True, slots=True)
class RateLimited:
    """Outcome: no token; retry after ``retry_after`` seconds (code ``rate_limited``)."""

    retry_after: float
    limits: str = ""
    """The limits the call was under, for the refusal's reason: which of them ran out is not
    known here (the store takes every bucket's token or none)."""


class RateLimiter:
    def __init__(self, store: Store, *, tenant_per_minute: int = 0) -> None:
        if tenant_per_minute < 0:
            raise ValueError("tenant_per_minute must be >= 0")
        self._store = store
        self._tenant_per_minute = tenant_per_minute

    def buckets(self, tenant: str, tool: ToolConfig) -> list[BucketSpec]:
        out = []
        if tool.rate_limit_per_minute:
            rpm = tool.rate_limit_per_minute
            out.append(BucketSpec(f"tool:{len(tenant)}:{tenant}:{tool.name}", rpm, rpm / 60.0))
        if self._tenant_per_minute:
            rpm = self._tenant_per_minute
            out.append(BucketSpec(f"tenant:{tenant}", rpm, rpm / 60.0))
        return out

    async def acquire(self, tenant: str, tool: ToolConfig, now: float) -> RateLimited | None:
        """Take a token for one call; None when allowed."""
        buckets = self.buckets(tenant, tool)
        if not buckets:
            return None
        wait = await self._store.take_tokens(buckets, now)
        if wait <= 0:
            return None
        return RateLimited(retry_after=math.ceil(wait * 1000) / 1000, limits=self._limits(tenant, tool))

    def _limits(self, tenant: str, tool: ToolConfig) -> str:
        limits = []
        if tool.rate_limit_per_minute:
            limits.append(f"{tool.name}'s {tool.rate_limit_per_minute} calls a minute")
        if self._tenant_per_minute:
            limits.append(f"tenant {tenant}'s {self._tenant_per_minute} calls a minute over all tools")
        return " or ".join(limits)


class ConcurrencyLimiter:
    """Process-local in-flight counters per tool name."""

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}

    def in_flight(self, tool: str) -> int:
        return self._in_flight.get(tool, 0)

    def try_acquire(self, tool: ToolConfig) -> bool:
        """Take a slot (True) or report the cap reached (False). Pair every True with ``release``."""
        cap = tool.max_concurrency
        if cap and self.in_flight(tool.name) >= cap:
            return False
        self._in_flight[tool.name] = self.in_flight(tool.name) + 1
        return True

    def release(self, tool: ToolConfig) -> None:
        left = self.in_flight(tool.name) - 1
        if left > 0:
            self._in_flight[tool.name] = left
        else:
            self._in_flight.pop(tool.name, None)

    @contextmanager
    def slot(self, tool: ToolConfig) -> Iterator[bool]:
        """Yields True when a slot was taken (and frees it on exit), False when the cap is reached."""
        taken = self.try_acquire(tool)
        try:
            yield taken
        finally:
            if taken:
                self.release(tool)
