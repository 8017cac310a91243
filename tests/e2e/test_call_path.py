"""Black-box tests of ExecuteTool over a real gRPC socket on 127.0.0.1 (issue A)."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from gateway.testing import calls_recorded, start_gateway
from tests.conftest import Client, audit_records, audit_steps


async def test_allowed_read_returns_an_untrusted_observation(client, gateway):
    resp = await client.call("lookup_policy", '{"topic": "refunds"}')
    assert resp.WhichOneof("outcome") == "observation"
    assert resp.code == "ok"
    obs = resp.observation
    assert obs.status == "ok" and obs.trust == "untrusted"
    assert json.loads(obs.data_json)["topic"] == "refunds"
    assert obs.provenance.decision_id == resp.decision_id
    assert obs.provenance.args_hash == resp.args_hash.strip() and resp.args_hash.startswith("sha256:")
    assert resp.policy_version.startswith("sha256:")


async def test_destructive_tool_is_denied_with_reasons(client, gateway):
    resp = await client.call("delete_file", '{"path": "notes.txt"}')
    assert resp.WhichOneof("outcome") == "refused"
    assert resp.refused.code == "policy_denied" == resp.code
    assert any("destructive" in r for r in resp.refused.reasons)
    records = [r for r in audit_records(gateway.app.config.audit_path) if r["decision_id"] == resp.decision_id]
    assert [r["stage"] for r in records][-1] == "result"
    assert records[-1]["code"] == "policy_denied" and records[-1]["executed"] is False


async def test_unknown_tool_is_refused(client):
    resp = await client.call("format_disk", "{}")
    assert resp.refused.code == "unknown_tool"


async def test_invalid_arguments_report_every_field_error(client):
    resp = await client.call("refund", '{"order_id": "bad id!", "amount": -5, "currency": "XYZ", "extra": 1}')
    assert resp.refused.code == "invalid_arguments"
    paths = sorted(e.path for e in resp.refused.field_errors)
    assert paths == ["", "/amount", "/currency", "/order_id"]
    assert all(e.message for e in resp.refused.field_errors)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"path": "a", "path": "b"}',  # duplicate key
        b'{"path": NaN}',
        b'{"path": Infinity}',
        b'{"n": 9007199254740993}',  # beyond 2^53
        b'{"n": 1e400}',
        b'["path"]',  # not an object
        b'"just a string"',
        b'{"path": "a"',  # truncated
        b'\xff\xfe{}',  # not UTF-8
        b'{"path": "\\ud800"}',  # lone surrogate
        b"[" * 5000 + b"]" * 5000,  # deep nesting
    ],
)
async def test_malformed_json_is_refused_as_invalid_arguments(client, raw):
    resp = await client.call("read_file", raw)
    assert resp.refused.code == "invalid_arguments"
    assert resp.args_hash == ""


async def test_oversize_arguments_are_refused(client):
    resp = await client.call("echo", json.dumps({"blob": "x" * 300_000}))
    assert resp.refused.code == "invalid_arguments"
    assert "limit" in resp.refused.field_errors[0].message


async def test_args_hash_ignores_key_order_and_whitespace_but_not_values(client):
    a = await client.call("echo", '{"a": 1, "b": [1, 2.5, "x"], "c": {"d": null}}')
    b = await client.call("echo", ' {\n "c" : {"d":null}, "b":[1,2.50,"x"],\t"a":1.0 } ')
    assert a.code == b.code == "ok"
    assert a.args_hash == b.args_hash
    for changed in (
        '{"a": 2, "b": [1, 2.5, "x"], "c": {"d": null}}',
        '{"a": 1, "b": [2.5, 1, "x"], "c": {"d": null}}',
        '{"a": 1, "b": [1, 2.5, "x"], "c": {"d": false}}',
        '{"a": 1, "b": [1, 2.5, "x"], "c": {"d": null}, "e": 0}',
        '{"a": 1, "b": [1, 2.5, "х"], "c": {"d": null}}',  # Cyrillic х
    ):
        assert (await client.call("echo", changed)).args_hash != a.args_hash


async def test_idempotent_replay_does_not_run_the_tool_again(client, gateway):
    sandbox = gateway.app.config.data_path / "sandbox"
    first = await client.call("count_call", '{"n": 1}', idempotency_key="order-7")
    again = await client.call("count_call", ' {"n":1} ', idempotency_key="order-7")
    assert first.code == again.code == "ok"
    assert not first.replayed and again.replayed
    assert again.decision_id == first.decision_id
    assert calls_recorded(sandbox, "count_call") == 1


async def test_outcomes_past_their_retention_are_swept_and_the_key_runs_again(client, gateway):
    app = gateway.app
    assert app._sweeper is not None and not app._sweeper.done()  # started with the server
    sandbox = app.config.data_path / "sandbox"
    first = await client.call("count_call", '{"n": 1}', idempotency_key="order-8")
    assert await app.sweep_claims() == 0  # within the retention (24 h): kept
    assert (await client.call("count_call", '{"n": 1}', idempotency_key="order-8")).replayed
    later = time.time() + app.config.store.claim_retention_hours * 3600 + 60
    assert await app.sweep_claims(now=later) == 1
    pruned = [r for r in audit_records(app.config.audit_path) if r.get("stage") == "claims_pruned"]
    assert len(pruned) == 1 and pruned[0]["deleted"] == 1
    again = await client.call("count_call", '{"n": 1}', idempotency_key="order-8")
    assert again.code == "ok" and not again.replayed and again.decision_id != first.decision_id
    assert calls_recorded(sandbox, "count_call") == 2


def test_claim_retention_below_two_hours_is_refused(tmp_path):
    from gateway.config import ConfigError
    from tests.conftest import demo_config

    with pytest.raises(ConfigError, match="claim_retention_hours"):
        demo_config(tmp_path, store={"claim_retention_hours": 1})


async def test_idempotency_key_reused_with_other_arguments_is_refused(client, gateway):
    await client.call("count_call", '{"n": 1}', idempotency_key="k1")
    resp = await client.call("count_call", '{"n": 2}', idempotency_key="k1")
    assert resp.refused.code == "idempotency_key_reused"
    assert calls_recorded(gateway.app.config.data_path / "sandbox", "count_call") == 1


async def test_concurrent_calls_with_one_idempotency_key_execute_once(client, gateway):
    resps = await asyncio.gather(*[client.call("count_call", '{"n": 3}', idempotency_key="same") for _ in range(20)])
    assert all(r.code == "ok" for r in resps)
    assert sum(not r.replayed for r in resps) == 1
    assert calls_recorded(gateway.app.config.data_path / "sandbox", "count_call") == 1


async def test_a_slow_tool_does_not_delay_a_fast_call(client):
    slow = [asyncio.create_task(client.call("sleep", '{"seconds": 2}')) for _ in range(20)]
    await asyncio.sleep(0.2)  # let the slow calls start
    started = time.monotonic()
    fast = await client.call("echo", '{"x": 1}')
    elapsed = time.monotonic() - started
    assert fast.code == "ok"
    assert elapsed < 0.5, f"fast call took {elapsed:.3f}s behind slow calls"
    assert not any(t.done() for t in slow)
    assert all(r.code == "ok" for r in await asyncio.gather(*slow))


async def test_tool_timeout_is_reported_as_tool_timeout(tmp_path):
    from tests.conftest import call_once, demo_config, policy_bundle

    cfg = demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "allow_all", ALLOW_ALL))})
    resp = await call_once(cfg, "sleep_short", '{"seconds": 5}')
    assert resp.code == "tool_timeout"
    assert resp.observation.status == "error" and resp.observation.error.type == "timeout"


ALLOW_ALL = """package toolgate
import rego.v1
decision := {"decision": "allow", "reasons": ["test policy"]}
visible := true
"""


async def test_unauthenticated_call_is_rejected_and_audited(gateway):
    for key in ("", "wrong-key"):
        c = Client(gateway.address, api_key=key)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.call("lookup_policy", '{"topic": "refunds"}')
        await c.close()
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    records = audit_records(gateway.app.config.audit_path)
    rejected = [r for r in records if r["stage"] == "authenticate" and r["code"] == "unauthenticated"]
    assert len(rejected) == 2
    assert not any(s["stage"] == "execute" for s in audit_steps(gateway.app.config.audit_path))


async def test_every_call_ends_with_one_result_record(client, gateway):
    resps = [
        await client.call("lookup_policy", '{"topic": "writes"}'),
        await client.call("nope", "{}"),
        await client.call("read_file", "[]"),
        await client.call("delete_file", '{"path": "x"}'),
        await client.call("write_file", '{"path": "x", "content": "y"}'),
    ]
    records = audit_records(gateway.app.config.audit_path)
    for resp in resps:
        mine = [r for r in records if r["decision_id"] == resp.decision_id]
        results = [r for r in mine if r["stage"] == "result"]
        assert len(results) == 1 and results[0]["code"] == resp.code
        calls = [r for r in mine if "steps" in r]  # the rest are approval events
        assert [r["stage"] for r in calls] == (["authorized", "result"] if resp.code == "ok" else ["result"])
        steps = [s["stage"] for r in calls for s in r["steps"]]
        assert steps[0] == "authenticate" and len(steps) == len(set(steps))
        if resp.code == "ok":  # written ahead of execution: every check, nothing after admission
            assert [s["stage"] for s in calls[0]["steps"]][-1] == "admit"
            assert [s["stage"] for s in calls[1]["steps"]] == ["execute"]
            assert calls[0]["seq"] < calls[1]["seq"]


async def test_list_tools_shows_schema_and_risk(client):
    from gateway._proto.toolgate.v1 import gateway_pb2 as pb

    resp = await client.stub.ListTools(pb.ListToolsRequest(), metadata=client.metadata)
    tools = {t.name: t for t in resp.tools}
    assert {"read_file", "write_file", "refund", "delete_file"} <= set(tools)
    assert tools["refund"].risk.side_effect == "external_write"
    assert json.loads(tools["refund"].input_schema_json)["required"] == ["order_id", "amount"]


async def test_empty_tool_name_is_a_malformed_request(client):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.call("", "{}")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_executed_call_is_in_the_log_file_before_its_tool_runs(client, gateway):
    path = gateway.app.config.audit_path
    call = asyncio.create_task(client.call("sleep", '{"seconds": 0.5}'))
    deadline = time.monotonic() + 5
    pending: list[dict] = []
    while not pending and time.monotonic() < deadline:  # read from disk while the tool sleeps
        await asyncio.sleep(0.02)
        pending = [r for r in audit_records(path) if r["stage"] == "authorized" and r["tool"] == "sleep"]
    assert pending and not call.done(), "no write-ahead record while the tool was running"
    ahead = pending[0]
    assert not [r for r in audit_records(path) if r["stage"] == "result" and r["decision_id"] == ahead["decision_id"]]
    assert ahead["args_hash"].startswith("sha256:") and ahead["steps"][-1]["stage"] == "admit"
    resp = await call
    assert resp.code == "ok" and resp.decision_id == ahead["decision_id"]
    result = [r for r in audit_records(path) if r["stage"] == "result" and r["decision_id"] == ahead["decision_id"]]
    assert len(result) == 1 and result[0]["executed"] is True and result[0]["seq"] > ahead["seq"]


async def test_no_tool_runs_when_its_write_ahead_record_cannot_be_written(client, gateway, monkeypatch):
    audit = gateway.app.audit
    record = audit.record

    def disk_full(stage, **fields):
        if stage == "authorized":
            raise OSError(28, "No space left on device")
        return record(stage, **fields)

    monkeypatch.setattr(audit, "record", disk_full)
    resp = await client.call("count_call", '{"n": 1}')
    assert resp.code == "internal_error" and resp.WhichOneof("outcome") == "refused"
    assert calls_recorded(gateway.app.config.data_path / "sandbox", "count_call") == 0
    result = [r for r in audit_records(gateway.app.config.audit_path) if r["decision_id"] == resp.decision_id]
    assert [r["stage"] for r in result] == ["result"] and result[0]["executed"] is False
    assert result[0]["code"] == "internal_error" and result[0]["steps"][-1]["stage"] == "admit"
