"""SQLite lock waits: another process's write lock delays a call without blocking the loop.

The lock is held by a plain sqlite3 connection in ``BEGIN IMMEDIATE`` (what a second worker
does for the microseconds of its write), here for a long, visible while.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from gateway.store.base import ApprovalStatus, ClaimStatus, StoreUnavailable
from gateway.store.sqlite import SQLiteStore


def hold_write_lock(path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_locked_database_delays_the_call_but_not_the_event_loop(tmp_path):
    store = SQLiteStore(tmp_path / "s.db", timeout=5.0)
    other = hold_write_lock(store.path)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    async def release_later() -> None:
        await asyncio.sleep(0.3)
        other.execute("COMMIT")

    t = asyncio.create_task(ticker())
    releaser = asyncio.create_task(release_later())
    started = time.monotonic()
    claim = await store.claim("idem:t:x", "k1", "sha256:a", time.time())
    waited = time.monotonic() - started
    t.cancel()
    await releaser
    assert claim.status is ClaimStatus.CLAIMED
    assert 0.25 <= waited < 2.0
    assert ticks >= 20  # the loop kept running while the claim waited (~60 ticks in 0.3 s)
    again = await store.claim("idem:t:x", "k1", "sha256:a", time.time())
    assert again.status is ClaimStatus.RUNNING  # claimed exactly once
    await store.close()
    other.close()


async def test_a_lock_held_past_the_timeout_is_store_unavailable(tmp_path):
    store = SQLiteStore(tmp_path / "s.db", timeout=0.2)
    other = hold_write_lock(store.path)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="waited 0.2 s"):
        await store.claim("idem:t:x", "k1", "sha256:a", time.time())
    assert 0.15 <= time.monotonic() - started < 1.5
    other.execute("ROLLBACK")
    assert (await store.claim("idem:t:x", "k1", "sha256:a", time.time())).status is ClaimStatus.CLAIMED
    await store.close()
    other.close()


async def test_a_transaction_waits_for_the_lock_and_commits_once(tmp_path):
    from tests.store.test_approvals_contract import record  # the contract's record builder

    store = SQLiteStore(tmp_path / "s.db", timeout=5.0)
    await store.create_approval(record("a-1"))
    other = hold_write_lock(store.path)
    asyncio.get_running_loop().call_later(0.2, other.execute, "COMMIT")
    vote = await store.add_approval_vote("a-1", "alice", "jti-1", time.time())
    assert vote.approvers == ("alice",)
    moved = await store.transition_approval("a-1", from_status=ApprovalStatus.PENDING, to_status=ApprovalStatus.APPROVED,
                                            now=time.time(), approvers=("alice",))
    assert moved is not None and moved.status is ApprovalStatus.APPROVED
    assert not store.db.in_transaction
    await store.close()
    other.close()


def _race_in_another_process(path: str, keys: list[str], out, go) -> None:
    async def run() -> list[str]:
        store = SQLiteStore(path)
        out.put("ready")
        go.wait(30)
        won = []
        for key in keys:
            if (await store.claim("idem:t:x", key, "sha256:a", time.time())).status is ClaimStatus.CLAIMED:
                won.append(key)
                await store.complete("idem:t:x", key, "{}", time.time())
        await store.close()
        return won

    out.put(asyncio.run(run()))


async def test_two_processes_claim_each_key_once_while_contending_for_the_lock(tmp_path):
    import multiprocessing

    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    keys = [f"k{i}" for i in range(2000)]
    ctx = multiprocessing.get_context("spawn")
    out, go = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_race_in_another_process, args=(str(path), keys, out, go))
    child.start()
    assert await asyncio.to_thread(out.get, True, 60) == "ready"
    go.set()  # both start together
    mine = []
    for key in keys:
        if (await store.claim("idem:t:x", key, "sha256:a", time.time())).status is ClaimStatus.CLAIMED:
            mine.append(key)
            await store.complete("idem:t:x", key, "{}", time.time())
        if len(mine) % 50 == 0:
            await asyncio.sleep(0)
    theirs = await asyncio.to_thread(out.get, True, 60)
    child.join(10)
    assert sorted(mine + theirs) == sorted(keys) and not set(mine) & set(theirs)
    await store.close()

