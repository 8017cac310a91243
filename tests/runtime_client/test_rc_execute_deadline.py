"""A call's deadline covers as long as the gateway lets the tool run (``ToolInfo.timeout_seconds``):
with the client's ``timeout`` alone (30 s by default), a tool allowed to run longer was cut off
by the deadline while the gateway went on running it, and its answer was lost
(``GatewayTimeoutError``). Real gateway (demo config plus test tools) on 127.0.0.1 port 0; the
client's timeout is made shorter than the tool's run instead of the tool longer than 30 s."""

from __future__ import annotations

import asyncio

import pytest

from runtime_client import AsyncGatewayClient, GatewayClient, Observation

gateway_testing = pytest.importorskip("gateway.testing")

from tests.conftest import AGENT_KEY  # noqa: E402

RUNS = 1.5  # seconds the tool sleeps: longer than the client's timeout, within the tool's (30 s)


async def test_tools_say_how_long_they_may_run(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        tools = {t.name: t for t in await client.list_tools()}
    assert tools["sleep"].timeout_seconds == 30 and tools["sleep_short"].timeout_seconds == 0.3


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
