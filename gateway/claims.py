"""At-most-once execution on top of the store's claims.

``ExecutionClaims.acquire`` either hands the caller the right to execute (``Won``), or the
stored outcome of whoever executed first (``Replay``), or a refusal (the key was used with
other arguments, or the first execution is still running past the wait bound). Waiters in
this process are woken by an event; waiters in other replicas poll the store.

An idempotency key's claim is bound to the caller as well as the arguments: a retry hears
the stored outcome, but another agent (or the same agent for another user) that sends the
same key, or the same derived key, is refused ``idempotency_key_reused``. It never runs the
tool a second time, and it is never handed an outcome that its own call was not allowed to get.

A claim still ``running`` after ``lease`` seconds (longer than its tool can run: see
``gateway.execute.longest_hold``) belonged to a process that died mid-call. Whether the tool
ran is unknown, so it is never run again under that key: the caller who finds it abandons it
in the store with an ``outcome_unknown`` refusal, which it and every later caller with the
key get as the replayed outcome. Without that, a retry after a crash would hear
``execution_in_progress`` ("retry later") for ever.

``ExecutionClaims.settled`` answers from a claim without ever taking it, for a caller that may
hear an outcome but never execute (a grant past its expiry whose jti a call claimed).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from dataclasses import dataclass
from datetime import datetime, timezone

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
    abandoned: bool = False  # this caller found the claim orphaned and stored outcome_unknown


ABANDONED_REASON = (
    "the gateway process running the first execution under this key stopped before it finished, so whether "
    "the tool ran is unknown; check the side effect, then retry with a new key"
)


@dataclass(frozen=True, slots=True)
class Conflict:
    refusal: Refused
    unknown_from: float | None = None
    """``settled``, a claim still running: when it is older than its lease (epoch seconds), from
    which a retry is answered ``outcome_unknown`` if its holder is gone."""


def bound(args_hash: str, caller: str) -> str:
    """What a claim is bound to: the args hash, and the caller's digest when one is given."""
    if not caller:
        return args_hash
    return f"{args_hash};caller=" + _digest(caller)


@functools.lru_cache(maxsize=4096)
def _digest(caller: str) -> str:
    """The caller's digest (one per caller identity; a bounded cache)."""
    return hashlib.sha256(caller.encode()).hexdigest()[:32]


class ExecutionClaims:
    def __init__(self, store: Store, *, poll_interval: float = 0.02) -> None:
        self._store = store
        self._poll = poll_interval
        self._events: dict[tuple[str, str], asyncio.Event] = {}

    async def acquire(
        self, scope: str, key: str, args_hash: str, *, wait: float, mismatch: Code, lease: float, caller: str = ""
    ) -> Won | Replay | Conflict:
        """``caller``: bind the claim to who made it too, so nobody else is handed its outcome."""
        binding = bound(args_hash, caller)
        claim = await self._store.claim(scope, key, binding, time.time())
        if claim.status is ClaimStatus.CLAIMED:
            self._events.setdefault((scope, key), asyncio.Event())
            return Won(scope, key)
        deadline = time.monotonic() + wait
        while claim is not None:
            if claim.args_hash != binding:  # checked at each read: a key released and claimed anew by
                # another caller (or with other arguments) while this one waited is theirs, not a replay
                what = "other arguments, or by another caller" if caller else "other arguments"
                return Conflict(Refused(mismatch, (f"{scope.split(':')[0]} key was used with {what}",)))
            if claim.status is not ClaimStatus.RUNNING:
                break
            if claim.created is not None and claim.created < time.time() - lease:
                return await self._abandon(scope, key, args_hash, lease, wait, mismatch, caller)
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
            return await self.acquire(scope, key, args_hash, wait=max(0.0, deadline - time.monotonic()),
                                      mismatch=mismatch, lease=lease, caller=caller)
        return Replay(outcome_codec.loads(claim.outcome_json or "").as_replay())

    async def _abandon(
        self, scope: str, key: str, args_hash: str, lease: float, wait: float, mismatch: Code, caller: str
    ) -> Won | Replay | Conflict:
        if (abandoned := await self._abandoned(scope, key, args_hash, lease)) is not None:
            return abandoned
        # finished (or abandoned by another caller) in the meantime: read it like any claim
        return await self.acquire(scope, key, args_hash, wait=wait, mismatch=mismatch, lease=lease, caller=caller)

    async def _abandoned(self, scope: str, key: str, args_hash: str, lease: float) -> Replay | None:
        """Store ``outcome_unknown`` under a claim still running after ``lease`` seconds; None when
        it is not (any more) such a claim."""
        unknown = CallResult("", Refused(Code.OUTCOME_UNKNOWN, (ABANDONED_REASON,)), args_hash, "")
        now = time.time()
        if not await self._store.abandon(scope, key, now - lease, outcome_json := outcome_codec.dumps(unknown), now):
            return None
        self._wake(Won(scope, key))
        return Replay(outcome_codec.loads(outcome_json).as_replay(), abandoned=True)

    async def settled(self, scope: str, key: str, args_hash: str, *, mismatch: Code, lease: float,
                      caller: str = "") -> Replay | Conflict | None:
        """What the claim on ``key`` answers a caller who may be told its outcome but never execute
        (a grant past its expiry: ``gateway.approvals.gate``). It never claims, so nothing ever
        runs on this answer: None when there is no claim; the stored outcome (``Replay``); a claim
        orphaned past ``lease`` abandoned as ``acquire`` does (``Replay``, abandoned); else, while
        its holder may still be running, ``execution_in_progress`` at once, saying from when
        (``unknown_from``) a retry is told ``outcome_unknown`` if the holder is gone."""
        binding = bound(args_hash, caller)
        for _ in range(3):  # an abandon lost to a holder finishing (or another abandon): read again
            claim = await self._store.get_claim(scope, key)
            if claim is None:
                return None
            if claim.args_hash != binding:
                return Conflict(Refused(mismatch, (f"{scope.split(':')[0]} key was used with other arguments",)))
            if claim.status is not ClaimStatus.RUNNING:
                return Replay(outcome_codec.loads(claim.outcome_json or "").as_replay())
            if claim.created is None or claim.created >= time.time() - lease:
                at = None if claim.created is None else claim.created + lease
                return Conflict(Refused(Code.EXECUTION_IN_PROGRESS, (_unfinished(at),)), at)
            if (abandoned := await self._abandoned(scope, key, args_hash, lease)) is not None:
                return abandoned
        return Conflict(Refused(Code.EXECUTION_IN_PROGRESS, ("the first execution has not finished; retry later",)))

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


def _unfinished(unknown_from: float | None) -> str:
    """``execution_in_progress``'s reason for a claim that may be abandoned from ``unknown_from``."""
    if unknown_from is None:
        return "the first execution has not finished; retry later"
    return (f"the first execution has not finished; retry later: if the gateway running it stopped, a retry from "
            f"{utc_text(unknown_from)} is answered outcome_unknown (whether the tool ran is not known)")


def utc_text(epoch: float) -> str:
    """``epoch`` as ISO 8601 in UTC, to the second (``2024-05-01T12:00:00+00:00``)."""
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")
