"""A closed client (or gRPC transport) raises ClientClosedError (code ``client_closed``), never a
grpc internal: calls after ``close()`` / the ``with`` block, and calls ``close()`` cut off.
Real gateway (demo config plus test tools) on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime_client import (
    ApprovalRequired, AsyncGatewayClient, ClientClosedError, ExecuteRequest, GatewayClient,
    ToolgateClientError,
)
from runtime_client._grpc import AsyncGrpcTransport, GrpcTransport

gateway_testing = pytest.importorskip("gateway.testing")

from tests.conftest import AGENT_KEY  # noqa: E402

IN_FLIGHT = 0.5  # seconds to let a call reach the gateway before closing under it


def assert_closed(exc: pytest.ExceptionInfo[ClientClosedError]) -> None:
    assert isinstance(exc.value, ToolgateClientError)
    assert exc.value.code == "client_closed" and "the client is closed" in str(exc.value)


def every_call(client: Any) -> list[Any]:
    """Each of a client's methods as a call without arguments (awaitable for the async client)."""
    return [client.list_tools, lambda: client.list_tools(refresh=True),
            lambda: client.execute("echo", {"a": 1}), lambda: client.get_approval("apr-x"),
            lambda: client.wait_for_approval("apr-x", timeout=5),
            lambda: client.execute_approved("apr-x", "echo", {})]


async def test_async_client_calls_after_its_with_block_raise_client_closed(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        assert await client.list_tools()  # the cache holds a fresh list
    for call in every_call(client):
        with pytest.raises(ClientClosedError) as exc:
            await call()
        assert_closed(exc)
    await client.close()  # closing again is fine


async def test_sync_client_calls_after_its_with_block_raise_client_closed(running):
    def use_after_close() -> None:
        with GatewayClient(running.address, api_key=AGENT_KEY) as client:
            assert client.list_tools()
        for call in every_call(client):
            with pytest.raises(ClientClosedError) as exc:
                call()
            assert_closed(exc)
        client.close()

    await asyncio.to_thread(use_after_close)  # the gateway serves on this test's event loop


async def test_grpc_transports_refuse_calls_after_close(running):
    transport = AsyncGrpcTransport(running.address, AGENT_KEY)
    assert await transport.list_tools()
    await transport.close()
    for call in (transport.list_tools, lambda: transport.execute(ExecuteRequest("echo", {})),
                 lambda: transport.get_approval("apr-x")):
        with pytest.raises(ClientClosedError):
            await call()
    with pytest.raises(ClientClosedError):
        async for _ in transport.watch_approval("apr-x", timeout=5):
            pass

    def sync_after_close() -> None:
        sync = GrpcTransport(running.address, AGENT_KEY)
        assert sync.list_tools()
        sync.close()
        for call in (sync.list_tools, lambda: sync.execute(ExecuteRequest("echo", {})),
                     lambda: sync.get_approval("apr-x"),
                     lambda: next(sync.watch_approval("apr-x", timeout=5))):
            with pytest.raises(ClientClosedError):
                call()

    await asyncio.to_thread(sync_after_close)


async def test_closing_under_a_call_in_flight_raises_client_closed_in_it(running):
    client = AsyncGatewayClient(running.address, api_key=AGENT_KEY)
    pending = (await client.execute("write_file", {"path": "a.txt", "content": "x"})).outcome
    assert isinstance(pending, ApprovalRequired)
    execution = asyncio.create_task(client.execute("sleep", {"seconds": 2}))
    watch = asyncio.create_task(client.wait_for_approval(pending.approval_id, timeout=30))
    await asyncio.sleep(IN_FLIGHT)
    await client.close()
    for task in (execution, watch):
        with pytest.raises(ClientClosedError) as exc:
            await task
        assert_closed(exc)

    sync = GatewayClient(running.address, api_key=AGENT_KEY)
    blocking = asyncio.create_task(asyncio.to_thread(sync.execute, "sleep", {"seconds": 2}))
    await asyncio.sleep(IN_FLIGHT)
    sync.close()
    with pytest.raises(ClientClosedError) as exc:
        await blocking
    assert_closed(exc)


async def test_cancelling_a_call_is_still_a_cancellation(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        call = asyncio.create_task(client.execute("sleep", {"seconds": 2}))
        await asyncio.sleep(IN_FLIGHT)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert (await client.execute("echo", {"a": 1})).code == "ok"


def test_a_closed_client_over_any_transport_raises_client_closed(fake):
    client = fake.client()
    assert client.list_tools()
    client.close()
    with pytest.raises(ClientClosedError):
        client.list_tools()
    with pytest.raises(ClientClosedError):
        client.execute("lookup_policy", {"topic": "refunds"})
    assert fake.executions() == []
