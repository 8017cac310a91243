"""A call's deadline covers as long as the gateway lets the tool run (``ToolInfo.longest_call_seconds``):
with the client's ``timeout`` alone (30 s by default), a tool allowed to run longer was cut off
by the deadline while the gateway went on running it, and its answer was lost
(``GatewayTimeoutError``). Real gateway (demo config plus test tools) on 127.0.0.1 port 0; the
client's timeout is made shorter than the tool's run instead of the tool longer than 30 s."""

from __future__ import annotations

import asyncio

import pytest

from gateway.execute import longest_run
from runtime_client import AsyncGatewayClient, GatewayClient, Observation, TransportError

gateway_testing = pytest.importorskip("gateway.testing")

from tests.conftest import AGENT_KEY  # noqa: E402

RUNS = 1.5  # seconds the tool sleeps: longer than the client's timeout, within the tool's (30 s)


async def test_tools_say_how_long_they_may_run(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        tools = {t.name: t for t in await client.list_tools()}
    configs = {t.name: t for t in running.app.config.tools}
    for name, timeout in (("sleep", 30), ("sleep_short", 0.3)):  # every attempt and back-off, its timeout at least
        assert tools[name].longest_call_seconds == longest_run(configs[name]) >= timeout


async def test_async_call_longer_than_the_client_timeout_gets_its_answer(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY, timeout=0.5) as client:
        result = await client.execute("sleep", {"seconds": RUNS})  # no list_tools first: the transport asks
    assert isinstance(result.outcome, Observation) and result.outcome.data == {"slept": RUNS}


async def test_sync_call_longer_than_the_client_timeout_gets_its_answer(running):
    def call():
        with GatewayClient(running.address, api_key=AGENT_KEY, timeout=0.5) as client:
            client.list_tools()
            return client.execute("sleep", {"seconds": RUNS})

    result = await asyncio.to_thread(call)
    assert isinstance(result.outcome, Observation) and result.outcome.data == {"slept": RUNS}


async def test_calls_that_start_together_list_the_tools_once(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        transport, listed = client._transport, 0
        real = transport.list_tools

        async def counted():
            nonlocal listed
            listed += 1
            return await real()

        transport.list_tools = counted
        results = await asyncio.gather(*(client.execute("echo", {"i": i}) for i in range(8)))
    assert all(isinstance(r.outcome, Observation) for r in results) and listed == 1


async def test_a_listing_that_fails_is_not_asked_again_before_every_call(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        transport, listed = client._transport, 0

        async def failing():
            nonlocal listed
            listed += 1
            raise TransportError("gateway UNAVAILABLE: listing down")

        transport.list_tools = failing
        for i in range(3):
            assert isinstance((await client.execute("echo", {"i": i})).outcome, Observation)
    assert listed == 1
