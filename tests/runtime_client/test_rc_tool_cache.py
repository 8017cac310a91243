"""The client's ListTools cache has a bound: a TTL (``tools_ttl``), an explicit refresh, and a
refusal that says the client's view is out of date (unknown_tool, invalid_arguments)."""

from __future__ import annotations

import asyncio

import pytest

from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, GatewayClient, StopReason, ToolCall, TransportError, resume, run_agent,
)
from runtime_client._client import DEFAULT_TOOLS_TTL
from runtime_client.testing import AsyncFakeTransport, FakeGateway, FakeTransport, scripted_decide

V2_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingTransport(AsyncFakeTransport):
    def __init__(self, fake: FakeGateway) -> None:
        super().__init__(fake)
        self.listed = 0

    async def list_tools(self):
        self.listed += 1
        return await super().list_tools()


class CountingSyncTransport(FakeTransport):
    def __init__(self, fake: FakeGateway) -> None:
        super().__init__(fake)
        self.listed = 0

    def list_tools(self):
        self.listed += 1
        return super().list_tools()


def names(tools) -> list[str]:
    return [t.name for t in tools]


def one_tool_fake() -> FakeGateway:
    fake = FakeGateway()
    fake.add_tool("read_notes")
    return fake


async def test_list_tools_is_cached_for_the_default_ttl_then_asked_again():
    fake, clock = one_tool_fake(), Clock()
    transport = CountingTransport(fake)
    client = AsyncGatewayClient(transport=transport, clock=clock)
    assert names(await client.list_tools()) == ["read_notes"]
    fake.add_tool("new_tool")
    clock.now += DEFAULT_TOOLS_TTL - 0.1
    assert names(await client.list_tools()) == ["read_notes"]
    assert transport.listed == 1
    clock.now += 0.1
    assert names(await client.list_tools()) == ["read_notes", "new_tool"]
    assert transport.listed == 2


async def test_unknown_tool_answer_makes_the_next_list_ask_the_gateway():
    fake = one_tool_fake()
    fake.add_tool("gone_tool")
    client = fake.async_client()  # real clock, default TTL: no time passes in this test
    assert names(await client.list_tools()) == ["read_notes", "gone_tool"]
    fake.remove_tool("gone_tool")
    refused = await client.execute("gone_tool", {})
    assert refused.code == "unknown_tool"
    assert names(await client.list_tools()) == ["read_notes"]


async def test_invalid_arguments_answer_makes_the_next_list_see_a_changed_schema():
    fake = one_tool_fake()
    client = fake.async_client()
    assert (await client.list_tools())[0].input_schema == {"type": "object"}
    fake.add_tool("read_notes", schema=V2_SCHEMA)  # the gateway's schema changes under the client
    refused = await client.execute("read_notes", {})
    assert refused.code == "invalid_arguments"
    assert (await client.list_tools())[0].input_schema == V2_SCHEMA


async def test_ttl_none_keeps_the_list_until_an_explicit_refresh():
    fake, clock = one_tool_fake(), Clock()
    client = AsyncGatewayClient(transport=AsyncFakeTransport(fake), tools_ttl=None, clock=clock)
    await client.list_tools()
    fake.add_tool("new_tool")
    clock.now += 10 * 365 * 86400
    assert names(await client.list_tools()) == ["read_notes"]
    assert names(await client.list_tools(refresh=True)) == ["read_notes", "new_tool"]


async def test_ttl_zero_asks_every_time():
    fake = one_tool_fake()
    transport = CountingTransport(fake)
    client = AsyncGatewayClient(transport=transport, tools_ttl=0, clock=Clock())
    await client.list_tools()
    await client.list_tools()
    assert transport.listed == 2


class HeldList(CountingTransport):
    """The first ListTools answer is held until ``release`` is set."""

    def __init__(self, fake: FakeGateway) -> None:
        super().__init__(fake)
        self.asked, self.release = asyncio.Event(), asyncio.Event()

    async def list_tools(self):
        tools = await super().list_tools()
        if self.listed == 1:
            self.asked.set()
            await asyncio.wait_for(self.release.wait(), 5)
        return tools


async def test_a_list_in_flight_when_the_gateway_says_unknown_tool_is_not_kept():
    fake = one_tool_fake()
    fake.add_tool("gone_tool")
    transport = HeldList(fake)
    client = AsyncGatewayClient(transport=transport)
    listing = asyncio.create_task(client.list_tools())
    await asyncio.wait_for(transport.asked.wait(), 5)
    fake.remove_tool("gone_tool")
    assert (await client.execute("gone_tool", {})).code == "unknown_tool"
    transport.release.set()
    assert names(await listing) == ["read_notes", "gone_tool"]  # its caller still gets its answer
    assert names(await client.list_tools()) == ["read_notes"]
    assert transport.listed == 2


def test_sync_client_has_the_same_bound():
    fake, clock = one_tool_fake(), Clock()
    fake.add_tool("gone_tool")
    transport = CountingSyncTransport(fake)
    client = GatewayClient(transport=transport, clock=clock)
    client.list_tools()
    fake.add_tool("new_tool")
    assert transport.listed == 1 and "new_tool" not in names(client.list_tools())
    clock.now += DEFAULT_TOOLS_TTL
    assert "new_tool" in names(client.list_tools())
    fake.remove_tool("gone_tool")
    assert client.execute("gone_tool", {}).code == "unknown_tool"
    assert names(client.list_tools()) == ["read_notes", "new_tool"]
    assert transport.listed == 3


@pytest.mark.parametrize("ttl, error", [(-1, ValueError), (float("nan"), ValueError),
                                        ("60", TypeError), (True, TypeError)])
def test_tools_ttl_must_be_seconds_or_none(ttl, error):
    fake = one_tool_fake()
    with pytest.raises(error):
        AsyncGatewayClient(transport=AsyncFakeTransport(fake), tools_ttl=ttl)
    with pytest.raises(error):
        GatewayClient(transport=FakeTransport(fake), tools_ttl=ttl)


async def test_a_long_run_sees_a_tool_the_gateway_added_mid_run():
    fake, clock = one_tool_fake(), Clock()
    client = AsyncGatewayClient(transport=AsyncFakeTransport(fake), clock=clock)
    seen = []

    def decide(state, context):
        seen.append(names(context.tools))
        if len(seen) == 1:
            fake.add_tool("new_tool")
            clock.now += DEFAULT_TOOLS_TTL
            return ToolCall("read_notes", {})
        return Answer("ok")

    await run_agent(AgentState(goal="x"), decide, client, checkpoints=None)
    assert seen == [["read_notes"], ["read_notes", "new_tool"]]


class ListFailsAfterFirst(CountingTransport):
    async def list_tools(self):
        if self.listed >= 1:
            self.listed += 1
            raise TransportError("gateway UNAVAILABLE: down", status="UNAVAILABLE")
        return await super().list_tools()


async def test_a_failed_refresh_mid_run_keeps_the_last_list_and_says_so():
    fake, clock = one_tool_fake(), Clock()
    client = AsyncGatewayClient(transport=ListFailsAfterFirst(fake), clock=clock)
    seen = []

    def decide(state, context):
        seen.append(names(context.tools))
        clock.now += DEFAULT_TOOLS_TTL
        return ToolCall("read_notes", {}) if len(seen) == 1 else Answer("ok")

    result = await run_agent(AgentState(goal="x"), decide, client, checkpoints=None)
    assert result.stop_reason == "success"
    assert seen == [["read_notes"], ["read_notes"]]
    [note] = [o for o in result.state.observations if o.kind == "runtime"]
    assert note.code == "transport_error" and note.step == 2 and "list_tools" in note.summary


class ListsWhileUp(AsyncFakeTransport):
    """ListTools fails while ``down``; every other call goes through."""

    def __init__(self, fake: FakeGateway) -> None:
        super().__init__(fake)
        self.down = False

    async def list_tools(self):
        if self.down:
            raise TransportError("gateway UNAVAILABLE: down", status="UNAVAILABLE")
        return await super().list_tools()


async def test_a_resume_that_cannot_list_the_tools_changes_nothing_and_a_later_one_goes_on(memory_checkpoints):
    fake = FakeGateway()
    fake.add_tool("read_secret", side_effect="read", policy="approval")
    call = ToolCall("read_secret", {"name": "db"})
    paused = await run_agent(AgentState(goal="x"), scripted_decide(call, Answer("done")),
                             AsyncGatewayClient(transport=AsyncFakeTransport(fake)), checkpoints=memory_checkpoints)
    [pending] = paused.state.pending_approvals
    fake.approve(pending.approval_id)
    transport = ListsWhileUp(fake)  # a resume in a new process: its client has listed nothing yet
    transport.down = True
    with pytest.raises(TransportError):
        await resume(paused.state.run_id, scripted_decide(Answer("done")), AsyncGatewayClient(transport=transport),
                     checkpoints=memory_checkpoints)
    stored, _ = memory_checkpoints.load(paused.state.run_id)
    assert stored.stop_reason is StopReason.AWAITING_APPROVAL
    assert [p.approval_id for p in stored.pending_approvals] == [pending.approval_id]
    assert fake.executions("read_secret") == []  # nothing redeemed

    transport.down = False
    done = await resume(paused.state.run_id, scripted_decide(Answer("done")), AsyncGatewayClient(transport=transport),
                        checkpoints=memory_checkpoints)
    assert done.stop_reason is StopReason.SUCCESS
    assert len(fake.executions("read_secret")) == 1  # redeemed once, by the resume that could go on
