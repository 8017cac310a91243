"""An idempotency key is the caller's: a retry hears the stored outcome, another agent of the
tenant that sends the same key (or the same derived key) is refused, runs nothing and is told
nothing of the first call's result. Over a real gRPC server and SQLite file."""

from __future__ import annotations

import hashlib
import json

import pytest

from gateway.testing import start_gateway
from tests.conftest import Client, demo_config

OPS_KEY = "ops-agent-key"  # a second agent of tenant acme


@pytest.fixture
async def two_agents(tmp_path):
    cfg = demo_config(tmp_path)
    ops = cfg.identities[0].model_copy(update={
        "name": "ops-agent", "agent": "ops-agent", "user": "omar",
        "api_key_sha256": hashlib.sha256(OPS_KEY.encode()).hexdigest()})
    running = await start_gateway(cfg.model_copy(update={"identities": [*cfg.identities, ops]}))
    demo, other = Client(running.address), Client(running.address, OPS_KEY)
    try:
        yield running, demo, other
    finally:
        await demo.close()
        await other.close()
        await running.stop()


async def test_another_agent_with_the_same_key_is_refused_and_told_nothing(two_agents) -> None:
    _, demo, other = two_agents
    args = '{"n": 1, "secret_note": "for demo-agent only"}'
    first = await demo.call("count_call", args, idempotency_key="k-1")
    assert (first.code, first.replayed) == ("ok", False)
    theirs = await other.call("count_call", args, idempotency_key="k-1")
    assert theirs.code == "idempotency_key_reused" and "another caller" in theirs.refused.reasons[0]
    assert not theirs.HasField("observation") and b"for demo-agent only" not in theirs.SerializeToString()
    again = await demo.call("count_call", args, idempotency_key="k-1")
    assert (again.code, again.replayed, again.observation.data_json) == ("ok", True, first.observation.data_json)


async def test_a_derived_key_still_stops_a_second_refund_by_another_agent(two_agents) -> None:
    _, demo, other = two_agents
    refund = json.dumps({"order_id": "A-100", "amount": 40, "currency": "EUR"})
    assert (await demo.call("refund", refund)).code == "ok"
    assert (await other.call("refund", refund)).code == "idempotency_key_reused"  # not refunded twice
    replay = await demo.call("refund", refund)
    assert (replay.code, replay.replayed) == ("ok", True)
    assert json.loads(replay.observation.data_json)["ledger_entries"] == 1


async def test_the_tools_key_fields_hold_whatever_key_the_caller_sends(two_agents) -> None:
    """An adapter sends a fresh key with every new call: the order's refund must still run once."""
    _, demo, _ = two_agents
    refund = json.dumps({"order_id": "B-200", "amount": 40, "currency": "EUR"})
    first = await demo.call("refund", refund, idempotency_key="adapter:1")
    assert (first.code, first.replayed) == ("ok", False)
    again = await demo.call("refund", refund, idempotency_key="adapter:2")
    assert (again.code, again.replayed) == ("ok", True)
    more = await demo.call("refund", json.dumps({"order_id": "B-200", "amount": 90, "currency": "EUR"}),
                           idempotency_key="adapter:3")
    assert more.code == "idempotency_key_reused"  # the same order, another amount: refused, not refunded again
    assert json.loads(again.observation.data_json)["ledger_entries"] == 1
