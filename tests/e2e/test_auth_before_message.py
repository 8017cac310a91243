"""A caller with no key is refused when its call's headers arrive, not once its message has:
a call that never sends its message (slowloris) is answered UNAUTHENTICATED at once and audited.
It was held open, unanswered and unaudited, for as long as the caller liked, and thousands of
them held the server's memory (~20 KB each)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.conftest import AGENT_KEY, audit_records

METHODS = ["/toolgate.v1.ToolGateway/ExecuteTool", "/toolgate.v1.ToolGateway/ListTools",
           "/toolgate.v1.Approvals/List", "/toolgate.v1.Approvals/Watch"]


async def _never_sent():
    await asyncio.Event().wait()  # the message never comes
    yield b""


@pytest.mark.parametrize("method", METHODS)
async def test_a_call_with_no_key_and_no_message_is_refused_at_once(gateway, config, method):
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        calls = [channel.stream_stream(method)(_never_sent(), timeout=30) for _ in range(20)]
        codes = await asyncio.wait_for(asyncio.gather(*(call.code() for call in calls)), timeout=10)
        assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}, codes
    refused = [r for r in audit_records(config.audit_path) if r["stage"] == "authenticate"]
    assert refused and refused[0]["method"] == method, refused


async def test_a_call_with_a_key_still_waits_for_its_message(gateway):
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        call = channel.stream_stream(METHODS[0])(_never_sent(), metadata=(("x-api-key", AGENT_KEY),), timeout=30)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(call.code()), timeout=0.5)
        call.cancel()
