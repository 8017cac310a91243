"""At-most-once execution on top of the store's claims.

``ExecutionClaims.acquire`` either hands the caller the right to execute (``Won``), or the
stored outcome of whoever executed first (``Replay``), or a refusal (the key was used with
other arguments, or the first execution is still running past the wait bound). Waiters in
this process are woken by an event; waiters in other replicas poll the store.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from gateway import outcome_codec
from gateway.codes import Code
from gateway.models import CallResult, Refused
from gateway.store.base import ClaimStatus, Store


@dataclass(frozen=True, slots=True)
class Won:
    scope: str
    key: str


@dataclass(frozen=True, slots=True)
class Replay:
    result: CallResult


@dataclass(frozen=True, slots=True)
class Conflict:
    refusal: Refused


class ExecutionClaims:
    def __init__(self, store: Store, *, poll_interval: float = 0.02) -> None:
        self._store = store
        self._poll = poll_interval
        self._events: dict[tuple[str, str], asyncio.Event] = {}

    async def acquire(
        self, scope: str, key: str, args_hash: str, *, wait: float, mismatch: Code
    ) -> Won | Replay | Conflict:
        claim = await self._store.claim(scope, key, args_hash, time.time())
        if claim.status is ClaimStatus.CLAIMED:
            self._events.setdefault((scope, key), asyncio.Event())
            return Won(scope, key)
        if claim.args_hash != args_hash:
            return Conflict(Refused(mismatch, (f"{scope.split(':')[0]} key was used with other arguments",)))
        deadline = time.monotonic() + wait
        while claim is not None and claim.status is ClaimStatus.RUNNING:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Conflict(
                    Refused(Code.EXECUTION_IN_PROGRESS, ("the first execution has not finished; retry later",))
                )
            event = self._events.get((scope, key))
            try:
                if event is not None:
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, 1.0))
                else:
                    await asyncio.sleep(min(self._poll, remaining))
            except asyncio.TimeoutError:
                pass
            claim = await self._store.get_claim(scope, key)
        if claim is None:  # released by its holder without executing: try again
            return await self.acquire(scope, key, args_hash, wait=max(0.0, deadline - time.monotonic()), mismatch=mismatch)
        return Replay(outcome_codec.loads(claim.outcome_json or "").as_replay())

    async def complete(self, won: Won, result: CallResult) -> None:
        await self._store.complete(won.scope, won.key, outcome_codec.dumps(result), time.time())
        self._wake(won)

    async def release(self, won: Won) -> None:
        await self._store.release(won.scope, won.key)
        self._wake(won)

    def _wake(self, won: Won) -> None:
        event = self._events.pop((won.scope, won.key), None)
        if event is not None:
            event.set()
