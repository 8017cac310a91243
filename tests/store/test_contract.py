"""The store contract, run alike on SQLite and PostgreSQL (see conftest.make_store).

Two store objects over one database stand for two gateway replicas.
"""

from __future__ import annotations

import asyncio

from gateway.store.base import BucketSpec, ClaimStatus

T0 = 1_800_000_000.0


# -- claims -----------------------------------------------------------------------------


async def test_first_claim_wins_and_the_next_sees_it_running(store):
    first = await store.claim("idem:acme:t", "k1", "sha256:a", T0)
    second = await store.claim("idem:acme:t", "k1", "sha256:a", T0 + 1)
    assert first.status is ClaimStatus.CLAIMED
    assert second.status is ClaimStatus.RUNNING
    assert second.args_hash == "sha256:a" and second.outcome_json is None


async def test_claim_with_other_arguments_returns_the_stored_hash(store):
    await store.claim("idem:acme:t", "k1", "sha256:a", T0)
    other = await store.claim("idem:acme:t", "k1", "sha256:b", T0)
    assert other.status is ClaimStatus.RUNNING and other.args_hash == "sha256:a"


async def test_completed_claim_returns_its_outcome(store):
    await store.claim("grant", "jti-1", "sha256:a", T0)
    await store.complete("grant", "jti-1", '{"code": "ok"}', T0 + 2)
    again = await store.claim("grant", "jti-1", "sha256:a", T0 + 3)
    assert again.status is ClaimStatus.DONE and again.outcome_json == '{"code": "ok"}'
    got = await store.get_claim("grant", "jti-1")
    assert got is not None and got.status is ClaimStatus.DONE and got.outcome_json == '{"code": "ok"}'


async def test_an_outcome_escaping_nul_is_stored_as_given(store):
    outcome = '{"text":"a\\u0000b"}'  # JSON text (outcome_codec's) escapes NUL: text holds it
    await store.claim("grant", "jti-1", "sha256:a", T0)
    await store.complete("grant", "jti-1", outcome, T0 + 2)
    assert (await store.get_claim("grant", "jti-1")).outcome_json == outcome


async def test_get_claim_of_unknown_key_is_none(store):
    assert await store.get_claim("grant", "nope") is None


async def test_released_claim_can_be_claimed_again(store):
    await store.claim("grant", "jti-1", "sha256:a", T0)
    await store.release("grant", "jti-1")
    assert await store.get_claim("grant", "jti-1") is None
    assert (await store.claim("grant", "jti-1", "sha256:a", T0)).status is ClaimStatus.CLAIMED


async def test_release_never_drops_a_finished_claim(store):
    await store.claim("grant", "jti-1", "sha256:a", T0)
    await store.complete("grant", "jti-1", '{"code": "ok"}', T0)
    await store.release("grant", "jti-1")
    got = await store.get_claim("grant", "jti-1")
    assert got is not None and got.status is ClaimStatus.DONE


async def test_complete_of_a_released_claim_stores_nothing(store):
    await store.claim("grant", "jti-1", "sha256:a", T0)
    await store.release("grant", "jti-1")
    await store.complete("grant", "jti-1", '{"code": "ok"}', T0)
    assert await store.get_claim("grant", "jti-1") is None


async def test_scopes_are_separate(store):
    assert (await store.claim("idem:acme:t", "same", "sha256:a", T0)).status is ClaimStatus.CLAIMED
    assert (await store.claim("idem:globex:t", "same", "sha256:a", T0)).status is ClaimStatus.CLAIMED
    assert (await store.claim("grant", "same", "sha256:a", T0)).status is ClaimStatus.CLAIMED


async def test_concurrent_claims_over_two_replicas_have_one_winner(make_store):
    replicas = [make_store(), make_store()]
    results = await asyncio.gather(
        *(replicas[i % 2].claim("idem:acme:t", "hot", "sha256:a", T0) for i in range(60))
    )
    assert sum(r.status is ClaimStatus.CLAIMED for r in results) == 1
    assert all(r.status is ClaimStatus.RUNNING for r in results if r.status is not ClaimStatus.CLAIMED)


async def test_a_claim_completed_on_one_replica_is_done_on_the_other(make_store):
    one, two = make_store(), make_store()
    await one.claim("grant", "jti-9", "sha256:a", T0)
    assert (await two.claim("grant", "jti-9", "sha256:a", T0)).status is ClaimStatus.RUNNING
    await one.complete("grant", "jti-9", '{"code": "ok"}', T0)
    assert (await two.claim("grant", "jti-9", "sha256:a", T0)).status is ClaimStatus.DONE


async def test_claims_survive_reopening_the_store(make_store):
    first = make_store()
    await first.claim("grant", "jti-1", "sha256:a", T0)
    await first.complete("grant", "jti-1", '{"code": "ok"}', T0)
    await first.close()
    got = await make_store().get_claim("grant", "jti-1")
    assert got is not None and got.status is ClaimStatus.DONE


async def test_prune_deletes_only_finished_claims_older_than_the_cutoff(store):
    await store.claim("idem:acme:t", "old-done", "sha256:a", T0)
    await store.complete("idem:acme:t", "old-done", '{"code": "ok"}', T0 + 1)
    await store.claim("idem:acme:t", "old-running", "sha256:a", T0)  # may still be executing
    await store.claim("grant", "new-done", "sha256:a", T0 + 100)
    await store.complete("grant", "new-done", '{"code": "ok"}', T0 + 101)
    assert await store.prune_claims(T0 + 50) == 1
    assert await store.get_claim("idem:acme:t", "old-done") is None
    assert (await store.get_claim("idem:acme:t", "old-running")).status is ClaimStatus.RUNNING
    assert (await store.get_claim("grant", "new-done")).status is ClaimStatus.DONE
    assert await store.prune_claims(T0 + 50) == 0
    # past its retention a key is free again: a retry with it runs (and is claimed once)
    assert (await store.claim("idem:acme:t", "old-done", "sha256:a", T0 + 200)).status is ClaimStatus.CLAIMED


async def test_prune_walks_every_batch(store):
    for i in range(1203):
        await store.claim("idem:acme:t", f"k{i}", "sha256:a", T0 + i)
        await store.complete("idem:acme:t", f"k{i}", "{}", T0 + i)
    await store.claim("idem:acme:t", "late", "sha256:a", T0 + 5000)
    await store.complete("idem:acme:t", "late", "{}", T0 + 5000)
    assert await store.prune_claims(T0 + 1000, batch=100) == 1000
    assert await store.get_claim("idem:acme:t", "k999") is None
    assert await store.get_claim("idem:acme:t", "k1000") is not None
    assert await store.get_claim("idem:acme:t", "late") is not None


async def test_a_running_claim_reads_back_when_it_was_claimed(store):
    await store.claim("idem:acme:t", "k1", "sha256:a", T0)
    assert (await store.get_claim("idem:acme:t", "k1")).created == T0
    assert (await store.claim("idem:acme:t", "k1", "sha256:a", T0 + 5)).created == T0


async def test_abandon_finishes_only_a_running_claim_older_than_the_cutoff(store):
    await store.claim("idem:acme:t", "orphan", "sha256:a", T0)
    await store.claim("idem:acme:t", "young", "sha256:a", T0 + 100)
    await store.claim("idem:acme:t", "done", "sha256:a", T0)
    await store.complete("idem:acme:t", "done", '{"code": "ok"}', T0 + 1)

    assert not await store.abandon("idem:acme:t", "young", T0 + 50, '{"code": "outcome_unknown"}', T0 + 60)
    assert not await store.abandon("idem:acme:t", "done", T0 + 50, '{"code": "outcome_unknown"}', T0 + 60)
    assert not await store.abandon("idem:acme:t", "missing", T0 + 50, '{"code": "outcome_unknown"}', T0 + 60)
    assert await store.abandon("idem:acme:t", "orphan", T0 + 50, '{"code": "outcome_unknown"}', T0 + 60)
    assert not await store.abandon("idem:acme:t", "orphan", T0 + 50, '{"code": "other"}', T0 + 61)  # once

    orphan = await store.get_claim("idem:acme:t", "orphan")
    assert orphan.status is ClaimStatus.DONE and orphan.outcome_json == '{"code": "outcome_unknown"}'
    assert (await store.get_claim("idem:acme:t", "young")).status is ClaimStatus.RUNNING
    assert (await store.get_claim("idem:acme:t", "done")).outcome_json == '{"code": "ok"}'
    # an abandoned claim ages out like any finished one (from when it was abandoned)
    assert await store.prune_claims(T0 + 59) == 1  # "done" only
    assert await store.prune_claims(T0 + 61) == 1


async def test_a_claim_completed_while_being_abandoned_keeps_its_outcome(make_store):
    a, b = make_store(), make_store()
    await a.claim("idem:acme:t", "k", "sha256:a", T0)
    done, abandoned = await asyncio.gather(
        a.complete("idem:acme:t", "k", '{"code": "ok"}', T0 + 1000),
        b.abandon("idem:acme:t", "k", T0 + 500, '{"code": "outcome_unknown"}', T0 + 1000),
    )
    got = await b.get_claim("idem:acme:t", "k")
    assert got.status is ClaimStatus.DONE
    assert got.outcome_json == ('{"code": "outcome_unknown"}' if abandoned else '{"code": "ok"}')


# -- rate-limit buckets -----------------------------------------------------------------


async def test_bucket_starts_full_then_refuses_with_the_wait(store):
    b = [BucketSpec("tool:4:acme:t", 2, 1.0)]
    assert await store.take_tokens(b, T0) == 0.0
    assert await store.take_tokens(b, T0) == 0.0
    wait = await store.take_tokens(b, T0)
    assert abs(wait - 1.0) < 1e-6


async def test_bucket_refills_with_time(store):
    b = [BucketSpec("k", 1, 0.5)]
    assert await store.take_tokens(b, T0) == 0.0
    assert abs(await store.take_tokens(b, T0 + 1.0) - 1.0) < 1e-6  # half a token after 1 s
    assert await store.take_tokens(b, T0 + 2.0) == 0.0


async def test_refill_never_exceeds_capacity(store):
    b = [BucketSpec("k", 2, 10.0)]
    await store.take_tokens(b, T0)
    results = [await store.take_tokens(b, T0 + 3600) for _ in range(3)]
    assert results[:2] == [0.0, 0.0] and results[2] > 0


async def test_buckets_are_taken_all_or_none(store):
    tool, tenant = BucketSpec("tool", 5, 1.0), BucketSpec("tenant", 1, 1.0)
    assert await store.take_tokens([tool, tenant], T0) == 0.0
    assert await store.take_tokens([tool, tenant], T0) > 0  # tenant is empty ...
    for _ in range(4):  # ... and the refused call did not spend the tool's tokens
        assert await store.take_tokens([tool], T0) == 0.0
    assert await store.take_tokens([tool], T0) > 0


async def test_wait_is_the_longest_of_the_empty_buckets(store):
    fast, slow = BucketSpec("fast", 1, 1.0), BucketSpec("slow", 1, 0.25)
    await store.take_tokens([fast, slow], T0)
    assert abs(await store.take_tokens([fast, slow], T0) - 4.0) < 1e-6


async def test_concurrent_takes_over_two_replicas_never_exceed_capacity(make_store):
    replicas = [make_store(), make_store()]
    b = [BucketSpec("shared", 10, 0.001), BucketSpec("tenant", 100, 0.001)]
    waits = await asyncio.gather(*(replicas[i % 2].take_tokens(b, T0) for i in range(40)))
    assert sum(w == 0.0 for w in waits) == 10


def test_every_store_implements_the_whole_protocol():
    import inspect

    from gateway.store.base import Store
    from gateway.store.postgres import PostgresStore
    from gateway.store.sqlite import SQLiteStore

    wanted = {n for n, f in inspect.getmembers(Store, inspect.iscoroutinefunction) if not n.startswith("_")}
    assert "claim" in wanted and "take_tokens" in wanted
    for cls in (SQLiteStore, PostgresStore):
        missing = sorted(n for n in wanted if not inspect.iscoroutinefunction(getattr(cls, n, None)))
        assert not missing, f"{cls.__name__} lacks {missing}"
