"""Three gateway processes over one PostgreSQL: at-most-once execution holds across replicas,
and a PostgreSQL restart fails in-flight calls closed, never double-executes, and heals."""

from __future__ import annotations

import asyncio
import collections
import time
import uuid

import grpc
import psycopg
import pytest

from gateway.audit import iter_steps

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


async def test_one_idempotency_key_over_three_replicas_executes_once(cluster, clients):
    key = f"idem-{uuid.uuid4().hex[:8]}"
    responses = await asyncio.gather(*(
        clients[i % 3].call("count_shared", {"key": key}, idempotency_key=key) for i in range(100)
    ))
    assert [r.code for r in responses] == ["ok"] * 100
    assert sum(not r.replayed for r in responses) == 1
    first = next(r for r in responses if not r.replayed)
    assert {r.decision_id for r in responses} == {first.decision_id}  # every replay is the first outcome
    assert len(cluster.executions(key)) == 1
    executed = [
        (i, step) for i in range(3) for step in iter_steps(cluster.audit(i))
        if step.get("stage") == "execute" and step.get("decision_id") == first.decision_id
    ]
    assert len(executed) == 1


async def test_same_key_with_other_arguments_is_refused_on_another_replica(cluster, clients):
    key = f"idem-{uuid.uuid4().hex[:8]}"
    assert (await clients[0].call("count_shared", {"key": key}, idempotency_key=key)).code == "ok"
    other = await clients[2].call("count_shared", {"key": key + "-changed"}, idempotency_key=key)
    assert other.code == "idempotency_key_reused"
    assert len(cluster.executions(key + "-changed")) == 0


async def test_postgres_restart_fails_calls_closed_and_the_replicas_recover(cluster, clients):
    """A restart shorter than the store timeout: calls whose connection was cut fail closed
    (internal_error), calls waiting for a connection go on once PostgreSQL is back."""
    tag = uuid.uuid4().hex[:8]
    keys = [f"restart-{tag}-{n}" for n in range(45)]
    calls = [
        asyncio.ensure_future(clients[n % 3].call("count_shared", {"key": k}, idempotency_key=k, timeout=60))
        for n, k in enumerate(keys)
    ]
    await _until_claims_running(cluster.dsn, tag, at_least=10)
    await asyncio.to_thread(cluster.server.stop)  # every pooled connection is cut
    await _until(lambda: len([x for x in cluster.executions() if tag in x["args"]["key"]]) >= 5)
    await asyncio.to_thread(cluster.server.start)
    results = await asyncio.gather(*calls, return_exceptions=True)

    # in flight: answered in-band, ok or failed closed; no transport error, no crash
    assert not any(isinstance(r, BaseException) for r in results), _errors(results)
    codes = collections.Counter(r.code for r in results)
    assert set(codes) <= {"ok", "internal_error"}, codes
    assert cluster.alive()

    # the replicas heal by themselves: a fresh call succeeds on each, within a bound
    for i, client in enumerate(clients):
        await _until_ok(client, f"after-restart-{tag}-{i}")

    # retrying every key never runs a side effect twice
    retried = await asyncio.gather(*(
        clients[(n + 1) % 3].call("count_shared", {"key": k}, idempotency_key=k, timeout=60) for n, k in enumerate(keys)
    ))
    assert {r.code for r in retried} <= {"ok", "execution_in_progress"}, collections.Counter(r.code for r in retried)
    per_key = collections.Counter(x["args"]["key"] for x in cluster.executions() if x["args"]["key"] in keys)
    assert max(per_key.values()) == 1, per_key
    for r, k in zip(retried, keys):
        if r.code == "ok" and r.replayed:
            assert per_key[k] == 1
    assert cluster.alive()


async def test_outage_longer_than_the_store_timeout_never_double_executes(cluster, clients):
    """Outcomes of tools that ran while PostgreSQL was down cannot be stored: their claims stay
    ``running`` and a retry gets execution_in_progress, never a second execution."""
    tag = uuid.uuid4().hex[:8]
    keys = [f"restart-{tag}-{n}" for n in range(15)]
    calls = [
        asyncio.ensure_future(clients[n % 3].call("count_shared", {"key": k}, idempotency_key=k, timeout=60))
        for n, k in enumerate(keys)
    ]
    await _until_claims_running(cluster.dsn, tag, at_least=5)
    await asyncio.to_thread(cluster.server.stop)
    try:
        results = await asyncio.gather(*calls, return_exceptions=True)  # each bounded by the store timeout
    finally:
        await asyncio.to_thread(cluster.server.start)
    assert cluster.alive()
    for i, client in enumerate(clients):
        await _until_ok(client, f"after-outage-{tag}-{i}")

    retried = await asyncio.gather(*(
        clients[(n + 1) % 3].call("count_shared", {"key": k}, idempotency_key=k, timeout=60) for n, k in enumerate(keys)
    ))
    per_key = collections.Counter(x["args"]["key"] for x in cluster.executions() if x["args"]["key"] in keys)
    assert max(per_key.values()) == 1, per_key
    for k, r in zip(keys, retried):
        assert r.code == ("execution_in_progress" if per_key[k] and r.code != "ok" else "ok"), (k, r.code)
        if r.code == "execution_in_progress":
            assert per_key[k] == 1  # ran during the outage; its outcome was never recorded
    in_band = [r for r in results if not isinstance(r, BaseException)]
    assert {r.code for r in in_band} <= {"ok", "internal_error"}
    assert len(in_band) == len(results), "every call must be answered in-band, even when the store fails"

    # once such a claim is older than its tool could run, a retry ends it: outcome_unknown,
    # stored for the key, on every replica, and still no second execution
    stuck = [k for k, r in zip(keys, retried) if r.code == "execution_in_progress"]
    async with await psycopg.AsyncConnection.connect(cluster.dsn, autocommit=True) as conn:
        await conn.execute(  # the lease passes: the claims are moved back in time
            "UPDATE claims SET created = created - 3600 WHERE key = ANY(%s) AND status = 'running'", (stuck,)
        )
    ended = await asyncio.gather(*(
        clients[n % 3].call("count_shared", {"key": k}, idempotency_key=k) for n, k in enumerate(stuck * 2)
    ))
    assert {(r.code, r.replayed) for r in ended} <= {("outcome_unknown", True)}, [r.code for r in ended]
    after = collections.Counter(x["args"]["key"] for x in cluster.executions() if x["args"]["key"] in keys)
    assert after == per_key


async def _until_claims_running(dsn: str, tag: str, *, at_least: int, timeout: float = 20.0) -> None:
    """Bounded wait until that many of the calls hold a running claim in the shared store."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = await (await conn.execute(
                "SELECT count(*) FROM claims WHERE status = 'running' AND key LIKE %s", (f"restart-{tag}-%",)
            )).fetchone()
            if row[0] >= at_least:
                return
            await asyncio.sleep(0.01)
    raise TimeoutError(f"fewer than {at_least} claims running after {timeout} s")


async def _until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)


async def _until_ok(client, key: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await client.call("count_shared", {"key": key}, idempotency_key=key)
        if last.code == "ok":
            return
        assert last.code == "internal_error", last
        await asyncio.sleep(0.05)
    raise TimeoutError(f"replica did not recover within {timeout} s: {last}")


def _errors(results) -> list[str]:
    return [f"{type(r).__name__}: {r.code() if isinstance(r, grpc.RpcError) else r}" for r in results if isinstance(r, BaseException)]
