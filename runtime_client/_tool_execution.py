"""Running the tool calls of one decision through the gateway.

Consecutive read-only calls (risk side_effect none/read, as ListTools reports) form one
batch run together, ``MAX_PARALLEL_CALLS`` at a time; every other call (writes, unknown tools) is a batch of
its own, so writes run one at a time and in order.

When several calls of one batch each want to stop the run, ``winning_halt`` picks the stop
by ``STOP_PRECEDENCE``, whatever order the calls were written or answered in.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime_client._client import AsyncGatewayClient
from runtime_client._decisions import ToolCall
from runtime_client._errors import ToolgateClientError
from runtime_client._state import StopReason
from runtime_client._types import ToolResult, ToolSpec


@dataclass(frozen=True, slots=True)
class PlannedCall:
    index: int
    call: ToolCall
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class CallOutcome:
    planned: PlannedCall
    result: ToolResult | None
    error: ToolgateClientError | None = None


STOP_PRECEDENCE = (StopReason.REFUSED, StopReason.BLOCKED, StopReason.TOOL_FAILURE,
                   StopReason.AWAITING_APPROVAL)
"""The stop a batch ends with when several of its calls want one: the first listed wins.

Every final stop outranks ``awaiting_approval``, the one stop a run comes back from. Were the
pause to win, ``resume`` would run the approved call and carry on as if the refused (or
blocked, or failed) call beside it had not ended the run; so a final stop wins, and the run
abandons the approvals its batch asked for. A refusal, the policy's own word, outranks
``blocked`` (the gateway wants evidence or is limiting the caller), which outranks a failure
of the tool or the transport: the stop names the strongest reason the batch gave.
"""


@dataclass(frozen=True, slots=True)
class Halt:
    """One call's outcome asks the run to stop; ``data`` goes to the ``stop`` trace event."""

    reason: StopReason
    data: dict[str, Any] = field(default_factory=dict)


def winning_halt(halts: Iterable[Halt | None]) -> Halt | None:
    """The halt that stops the run, by ``STOP_PRECEDENCE`` and then by its data, so the
    choice (and what the stop event records) never depends on the order of ``halts``."""
    found = [h for h in halts if h is not None]
    return min(found, default=None, key=lambda h: (
        STOP_PRECEDENCE.index(h.reason), json.dumps(h.data, sort_keys=True, default=str)))


def plan(run_id: str, step: int, calls: Sequence[ToolCall]) -> list[PlannedCall]:
    return [PlannedCall(i, c, f"{run_id}:{step}:{i}") for i, c in enumerate(calls)]


def batches(planned: list[PlannedCall], tools: dict[str, ToolSpec]) -> list[list[PlannedCall]]:
    out: list[list[PlannedCall]] = []
    for p in planned:
        spec = tools.get(p.call.name)
        read_only = spec is not None and spec.read_only
        if read_only and out and out[-1][-1].call.name in tools and _all_read(out[-1], tools):
            out[-1].append(p)
        else:
            out.append([p])
    return out


def _all_read(batch: list[PlannedCall], tools: dict[str, ToolSpec]) -> bool:
    return all(p.call.name in tools and tools[p.call.name].read_only for p in batch)


async def call_one(gateway: AsyncGatewayClient, run_id: str, step: int, p: PlannedCall,
                   **extra: str) -> CallOutcome:
    fields: dict[str, Any] = {"run_id": run_id, "step": step, "idempotency_key": p.idempotency_key, **extra}
    if p.call.evidence is not None:
        fields["evidence"] = p.call.evidence
    try:
        return CallOutcome(p, await gateway.execute(p.call.name, p.call.input, **fields))
    except ToolgateClientError as exc:
        return CallOutcome(p, None, exc)


MAX_PARALLEL_CALLS = 8
"""Calls of one read-only batch in flight at once."""


async def run_batch(gateway: AsyncGatewayClient, run_id: str, step: int,
                    batch: list[PlannedCall]) -> list[CallOutcome]:
    if len(batch) == 1:
        return [await call_one(gateway, run_id, step, batch[0])]
    slots = asyncio.Semaphore(MAX_PARALLEL_CALLS)

    async def bounded(p: PlannedCall) -> CallOutcome:
        async with slots:
            return await call_one(gateway, run_id, step, p)

    return list(await asyncio.gather(*(bounded(p) for p in batch)))
