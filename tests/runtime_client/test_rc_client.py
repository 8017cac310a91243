"""GatewayClient / AsyncGatewayClient over the in-memory fake and over real gRPC (fake servicer)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import runtime_client
from runtime_client import (
    ApprovalRequired, ApprovalTimeoutError, AsyncGatewayClient, AuthenticationError, EvidenceRequired,
    GatewayClient, GrantUnavailableError, MalformedRequestError, Observation, Refused, ToolgateClientError,
    TransportError,
)
from runtime_client.testing import serve_fake_gateway


def test_sync_client_outcomes_are_typed_values(fake):
    client = fake.client()
    assert {t.name for t in client.list_tools()} >= {"lookup_policy", "write_file"}
    assert isinstance(client.execute("lookup_policy", {"topic": "refunds"}).outcome, Observation)
    assert client.execute("delete_file", {"path": "x"}).outcome == Refused("policy_denied", ("policy denies delete_file",))
    assert isinstance(client.execute("write_file", {"path": "a", "content": "b"}).outcome, ApprovalRequired)
    bad = client.execute("lookup_policy", {"topic": 3})
    assert bad.code == "invalid_arguments" and bad.outcome.field_errors[0].path == "/topic"


def test_sync_wait_for_approval_and_execute_approved(fake):
    client = fake.client()
    pending = client.execute("write_file", {"path": "a", "content": "b"}).outcome
    threading.Timer(0.05, fake.approve, args=(pending.approval_id,)).start()
    approval = client.wait_for_approval(pending.approval_id, timeout=5)
    assert approval.status == "approved"
    result = client.execute_approved(pending.approval_id, "write_file", {"path": "a", "content": "b"})
    assert result.code == "ok" and len(fake.executions("write_file")) == 1


def test_sync_wait_times_out(fake):
    client = fake.client()
    pending = client.execute("write_file", {"path": "a", "content": "b"}).outcome
    with pytest.raises(ApprovalTimeoutError) as exc:
        client.wait_for_approval(pending.approval_id, timeout=0.05)
    assert exc.value.approval_id == pending.approval_id


async def test_fetch_grant_of_pending_approval_raises(fake):
    client = fake.async_client()
    pending = (await client.execute("write_file", {"path": "a", "content": "b"})).outcome
    with pytest.raises(GrantUnavailableError) as exc:
        await client.fetch_grant(pending.approval_id)
    assert exc.value.status == "pending"


def test_client_misuse_raises_type_and_value_errors(fake, monkeypatch):
    client = fake.client()
    with pytest.raises(TypeError):
        client.execute("read_file", ["a"])
    with pytest.raises(ValueError):
        client.execute("", {})
    monkeypatch.delenv("TOOLGATE_TARGET", raising=False)
    with pytest.raises(ValueError):
        GatewayClient(api_key="k")


@pytest.mark.parametrize("key", ["clé", "key\n", "key\x00"])
@pytest.mark.parametrize("client_class", [GatewayClient, AsyncGatewayClient])
def test_an_api_key_grpc_metadata_cannot_carry_is_refused_when_the_client_is_made(client_class, key):
    with pytest.raises(ValueError, match="gRPC metadata cannot carry"):
        client_class("127.0.0.1:50051", api_key=key)


async def test_evidence_required_is_an_outcome():
    from runtime_client.testing import FakeGateway
    fake = FakeGateway()
    fake.add_tool("t", policy="evidence")
    result = await fake.async_client().execute("t", {})
    assert result.outcome == EvidenceRequired(("ticket_id",), ("need a ticket",))


async def test_grpc_transport_round_trip_over_a_socket(fake):
    async with serve_fake_gateway(fake, api_key="k1") as address:
        async with AsyncGatewayClient(address, api_key="k1") as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert tools["lookup_policy"].read_only and not tools["write_file"].read_only
            assert tools["lookup_policy"].input_schema["required"] == ["topic"]
            ok = await client.execute("lookup_policy", {"topic": "refunds"}, run_id="r1", step=1)
            assert ok.outcome.data == {"topic": "refunds", "text": "Refunds above 500 EUR need a manager."}
            assert ok.outcome.trust == "untrusted" and ok.decision_id
            pending = (await client.execute("write_file", {"path": "a", "content": "b"})).outcome
            assert isinstance(pending, ApprovalRequired)
            waiter = asyncio.create_task(client.wait_for_approval(pending.approval_id, timeout=5))
            await asyncio.sleep(0.05)
            fake.approve(pending.approval_id)
            assert (await waiter).status == "approved"
            done = await client.execute_approved(pending.approval_id, "write_file", {"path": "a", "content": "b"})
            assert done.code == "ok"
            refused = await client.execute("delete_file", {"path": "a"})
            assert isinstance(refused.outcome, Refused) and refused.outcome.code == "policy_denied"


async def test_grpc_errors_translate_to_one_root(fake):
    async with serve_fake_gateway(fake, api_key="k1") as address:
        async with AsyncGatewayClient(address, api_key="wrong") as client:
            with pytest.raises(AuthenticationError):
                await client.list_tools()
        async with AsyncGatewayClient(address, api_key="k1") as client:
            # the public API refuses an empty name itself; go under it to see the gateway's answer
            with pytest.raises(MalformedRequestError):
                await client._transport.execute(runtime_client.ExecuteRequest("", {}))
    async with AsyncGatewayClient("127.0.0.1:1", api_key="k", timeout=0.5) as client:
        with pytest.raises(TransportError) as exc:
            await client.list_tools()
    assert isinstance(exc.value, ToolgateClientError)


def test_exported_names_are_pinned():
    assert runtime_client.__all__ == sorted(runtime_client.__all__)
    assert {"AgentState", "AsyncGatewayClient", "GatewayClient", "run_agent", "resume", "StateGraph",
            "TrajectoryEval", "ToolgateClientError", "Observation", "Refused", "ApprovalRequired",
            "EvidenceRequired", "Answer", "ToolCall", "AskHuman", "Stop"} <= set(runtime_client.__all__)
    assert len(runtime_client.__all__) == 74
    for name in runtime_client.__all__:
        assert getattr(runtime_client, name) is not None
    assert not any(n.startswith("_") or "pb" in n.lower() for n in runtime_client.__all__)


@pytest.mark.parametrize("half", ["TOOLGATE_CLIENT_KEY", "TOOLGATE_CLIENT_CERT"])
def test_a_client_key_without_its_certificate_is_refused_when_the_client_is_made(monkeypatch, tmp_path, half):
    (tmp_path / "f.pem").write_text("x")
    for name in ("TOOLGATE_CA_FILE", "TOOLGATE_CLIENT_KEY", "TOOLGATE_CLIENT_CERT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(half, str(tmp_path / "f.pem"))
    with pytest.raises(ValueError, match="give both, or neither"):
        GatewayClient("127.0.0.1:50051", api_key="k")
