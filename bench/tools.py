"""Tools the benchmark registers (python executor, async so no worker-thread hop)."""

from __future__ import annotations

import asyncio
from typing import Any


async def noop(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Return at once: the gateway's own cost is all that is measured."""
    return {"ok": True}


async def slow(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Sleep ``seconds`` without holding the event loop (head-of-line scenario)."""
    await asyncio.sleep(float(args.get("seconds", 1)))
    return {"slept": args.get("seconds", 1)}
