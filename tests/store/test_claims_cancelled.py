"""A claim whose caller goes away while the store answers is not left ``running``: PostgreSQL
may commit the claim's INSERT after the caller's task was cancelled (the caller never hears it),
and a claim nobody holds kept every retry under the key waiting, then told ``outcome_unknown``
for a tool that never ran. The store gives such a claim back once it lands."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from gateway.store.base import ClaimStatus
from gateway.store.postgres import PostgresStore

SCOPE = "idem:acme:t"


@pytest.fixture
async def pg(pg_dsn):
    """A PostgreSQL store (its pool open, its schema made) and a connection that can lock its claims."""
    store = PostgresStore(pg_dsn)
    blocker = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        await store.release(SCOPE, "warm")
        yield store, blocker
    finally:
        await blocker.close()
        await store.close()


async def _cancelled_while_locked(blocker, write):
    """Start ``write`` while the claims table is locked (it waits in the server), cancel its caller,
    and leave the lock held (``COMMIT`` on ``blocker`` lets the write go on)."""
    await blocker.execute("BEGIN")
    await blocker.execute("LOCK TABLE claims IN ACCESS EXCLUSIVE MODE")
    task = asyncio.ensure_future(write)
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _claimable(store, scope, key):
    """Whether the key can be claimed anew within a few seconds (the cancelled caller's write may
    land after the cancel: only a claim of our own says it was given back)."""
    for _ in range(100):
        if (await store.claim(scope, key, "sha256:a", time.time())).status == ClaimStatus.CLAIMED:
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.postgres
async def test_a_claim_cancelled_while_postgres_is_blocked_is_given_back(pg):
    store, blocker = pg
    await _cancelled_while_locked(blocker, store.claim(SCOPE, "k", "sha256:a", time.time()))
    await blocker.execute("COMMIT")  # the INSERT goes on, if the server still has it
    assert await _claimable(store, SCOPE, "k")


@pytest.mark.postgres
async def test_a_claim_cancelled_after_postgres_committed_it_is_given_back(pg):
    """The INSERT committed, and the caller is cancelled before the answer reaches it (here: while
    the pool takes the connection back, slowed so the cancel lands there)."""
    store, _ = pg
    returned = store._pool.putconn
    slow = asyncio.Event()

    async def slow_putconn(conn):
        if slow.is_set():
            await asyncio.sleep(0.5)
        await returned(conn)

    store._pool.putconn = slow_putconn
    slow.set()
    task = asyncio.ensure_future(store.claim(SCOPE, "k", "sha256:a", time.time()))
    await asyncio.sleep(0.2)
    slow.clear()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _claimable(store, SCOPE, "k")


@pytest.mark.postgres
async def test_an_outcome_whose_caller_goes_away_while_it_is_stored_is_stored(pg):
    """Completing a claim runs to its end: left ``running``, the tool's real outcome was lost
    and a retry under the key was told ``outcome_unknown``."""
    store, blocker = pg
    assert (await store.claim(SCOPE, "k", "sha256:a", time.time())).status == ClaimStatus.CLAIMED
    await _cancelled_while_locked(blocker, store.complete(SCOPE, "k", '{"code": "ok"}', time.time()))
    await blocker.execute("COMMIT")
    for _ in range(100):
        claim = await store.get_claim(SCOPE, "k")
        if claim.status == ClaimStatus.DONE:
            break
        await asyncio.sleep(0.05)
    assert claim.status == ClaimStatus.DONE and claim.outcome_json == '{"code": "ok"}'


@pytest.mark.postgres
async def test_a_claim_given_back_while_the_store_closes_is_given_back_before_it_closes(pg):
    """Shutdown cancels the calls in flight, then closes the store: a claim that lands while the
    store waits for unfinished writes starts its release then, and that is waited for too."""
    store, blocker = pg
    await _cancelled_while_locked(blocker, store.claim(SCOPE, "k", "sha256:a", time.time()))
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.2)
    await blocker.execute("COMMIT")
    await closing
    assert not store._unfinished  # nothing is left for the end of the event loop to cancel
    rows = await (await blocker.execute("SELECT status FROM claims WHERE key = 'k'")).fetchall()
    assert rows == []
