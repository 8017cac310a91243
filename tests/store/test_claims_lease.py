"""ExecutionClaims over a real SQLite store: a running claim older than its lease was
orphaned by a dead process and ends ``outcome_unknown``; a younger one is waited for."""

from __future__ import annotations

import time

import pytest

from gateway.claims import Conflict, ExecutionClaims, Replay, Won
from gateway.codes import Code
from gateway.models import CallResult, Refused
from gateway.store.sqlite import SQLiteStore

SCOPE = "idem:acme:t"


async def _orphan(store: SQLiteStore, key: str, age: float) -> None:
    """A claim taken ``age`` seconds ago by a process that is gone."""
    await store.claim(SCOPE, key, "sha256:a", time.time() - age)


@pytest.mark.parametrize(
    "scope, mismatch",
    [(SCOPE, Code.IDEMPOTENCY_KEY_REUSED), ("grant", Code.APPROVAL_ARGS_MISMATCH)],
    ids=["idempotency_key", "consumed_grant"],
)
async def test_an_orphaned_claim_ends_outcome_unknown_once_and_for_all(tmp_path, scope, mismatch):
    store = SQLiteStore(tmp_path / "s.db")
    claims = ExecutionClaims(store)
    try:
        await store.claim(scope, "k", "sha256:a", time.time() - 120)  # by a process that is gone
        first = await claims.acquire(scope, "k", "sha256:a", wait=5, mismatch=mismatch, lease=60)
        assert isinstance(first, Replay) and first.abandoned
        assert first.result.code == Code.OUTCOME_UNKNOWN and first.result.replayed
        assert first.result.args_hash == "sha256:a"
        again = await ExecutionClaims(store).acquire(scope, "k", "sha256:a", wait=5, mismatch=mismatch, lease=60)
        assert isinstance(again, Replay) and not again.abandoned and again.result.code == Code.OUTCOME_UNKNOWN
        # changed arguments under the key (or grant) are still refused as such, not told the outcome
        other = await claims.acquire(scope, "k", "sha256:b", wait=5, mismatch=mismatch, lease=60)
        assert isinstance(other, Conflict) and other.refusal.code == mismatch
    finally:
        await store.close()


async def test_a_claim_within_its_lease_is_waited_for_not_abandoned(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    claims = ExecutionClaims(store, poll_interval=0.01)
    try:
        await _orphan(store, "k", age=30)
        got = await claims.acquire(SCOPE, "k", "sha256:a", wait=0.2, mismatch=Code.IDEMPOTENCY_KEY_REUSED, lease=60)
        assert isinstance(got, Conflict) and got.refusal.code == Code.EXECUTION_IN_PROGRESS
        assert (await store.get_claim(SCOPE, "k")).outcome_json is None  # still running, untouched
    finally:
        await store.close()


async def test_a_live_holder_finishing_first_wins_over_the_abandon(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    claims = ExecutionClaims(store)
    try:
        won = await claims.acquire(SCOPE, "k", "sha256:a", wait=5, mismatch=Code.IDEMPOTENCY_KEY_REUSED, lease=60)
        assert isinstance(won, Won)
        await claims.complete(won, CallResult("d-1", Refused(Code.TOOL_ERROR, ("x",)), "sha256:a", "v"))
        got = await claims.acquire(SCOPE, "k", "sha256:a", wait=5, mismatch=Code.IDEMPOTENCY_KEY_REUSED, lease=0)
        assert isinstance(got, Replay) and not got.abandoned and got.result.decision_id == "d-1"
    finally:
        await store.close()
