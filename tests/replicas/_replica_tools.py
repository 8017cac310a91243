"""A counting tool for the replica tests: every execution appends one line to a file shared by
all replicas (``constraints.counter``), after ``constraints.delay`` seconds, so concurrent calls
overlap the execution window. O_APPEND keeps lines whole across processes."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any


async def count_shared(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    await asyncio.sleep(float(ctx.constraints.get("delay", 0)))
    line = (json.dumps({"args": args, "decision_id": ctx.decision_id}, sort_keys=True) + "\n").encode()
    fd = os.open(ctx.constraints["counter"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return {"recorded": True, "args": args}


def executions(counter: str | Path) -> list[dict[str, Any]]:
    path = Path(counter)
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
