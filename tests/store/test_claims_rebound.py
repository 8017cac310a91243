"""A caller waiting on a running claim whose holder releases it (refused by policy, say) while
another caller takes the key, with other arguments or as someone else, is refused: the new claim
is not its own. Its binding was checked at the first read only, and it was handed the other
caller's outcome as its replay. Two ExecutionClaims on one SQLite file are two workers, or two
replicas, sharing the store; one process is checked too."""

from __future__ import annotations

import asyncio

import pytest

from gateway.claims import Conflict, ExecutionClaims, Replay, Won
from gateway.codes import Code
from gateway.models import CallResult, Refused
from gateway.store.sqlite import SQLiteStore

SCOPE = "idem:acme:refund"
AGENT_1, AGENT_2 = '["agent-1",""]', '["agent-2","bob"]'


def _acquire(claims: ExecutionClaims, args_hash: str, caller: str):
    return claims.acquire(SCOPE, "K", args_hash, wait=5, mismatch=Code.IDEMPOTENCY_KEY_REUSED, lease=300, caller=caller)


@pytest.mark.parametrize("shared", [False, True], ids=["one_process", "two_workers"])
@pytest.mark.parametrize("second", [("sha256:Y", AGENT_2), ("sha256:Y", AGENT_1), ("sha256:X", AGENT_2)],
                         ids=["other_caller_other_args", "same_caller_other_args", "other_caller_same_args"])
async def test_a_waiter_is_never_handed_a_claim_that_is_not_its_own(tmp_path, shared, second):
    first_store = SQLiteStore(tmp_path / "s.db")
    other_store = SQLiteStore(tmp_path / "s.db") if shared else first_store
    waiting_on, taking = ExecutionClaims(other_store, poll_interval=0.01), ExecutionClaims(first_store)
    try:
        holder = await _acquire(taking, "sha256:X", AGENT_1)
        assert isinstance(holder, Won)
        waiter = asyncio.create_task(_acquire(waiting_on, "sha256:X", AGENT_1))  # agent-1's retry
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await taking.release(holder)  # not executed: the key is free
        taken = await _acquire(taking, *second)  # at once, before the waiter looks again
        assert isinstance(taken, Won)
        theirs = CallResult("dec-2", Refused(Code.POLICY_DENIED, ("the other caller's outcome",)), second[0], "p")
        await taking.complete(taken, theirs)
        result = await asyncio.wait_for(waiter, 5)
        assert isinstance(result, Conflict), result
        assert result.refusal.code == Code.IDEMPOTENCY_KEY_REUSED
        assert not isinstance(result, Replay)
    finally:
        await first_store.close()
        if shared:
            await other_store.close()
