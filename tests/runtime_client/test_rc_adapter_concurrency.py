"""Identical calls made concurrently through an adapter (a framework running tool calls in
parallel) share one approval request, and one approval runs exactly one of them."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from runtime_client import AsyncGatewayClient
from runtime_client.adapters import ApprovalMemory
from runtime_client.testing import AsyncFakeTransport, FakeGateway

ARGS = {"path": "notes.txt", "content": "hello"}
APPROVAL_ID = re.compile(r"apr-\d+")


class CountsCalls(ApprovalMemory):
    """Counts adapter calls as they start (each asks for its key first)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0
        self.changed = asyncio.Event()

    def key(self, run_id, tool, args):
        self.started += 1
        self.changed.set()
        return super().key(run_id, tool, args)


class WaitsForCalls(AsyncFakeTransport):
    """Holds every request until ``expected`` adapter calls have started, so the calls of a
    round overlap however the adapter orders them."""

    def __init__(self, fake: FakeGateway, memory: CountsCalls) -> None:
        super().__init__(fake)
        self.memory, self.expected = memory, 0

    async def execute(self, request):
        while self.memory.started < self.expected:
            self.memory.changed.clear()
            await asyncio.wait_for(self.memory.changed.wait(), 5)
        return await super().execute(request)


def langchain_invoker(client, spec, memory):
    from runtime_client.adapters.langchain import langchain_tool

    tool = langchain_tool(client, spec, approvals=memory)
    return lambda args: tool.ainvoke(args)


def openai_agents_invoker(client, spec, memory):
    from agents.tool_context import ToolContext

    from runtime_client.adapters.openai_agents import function_tool

    tool = function_tool(client, spec, approvals=memory)

    async def invoke(args):
        text = json.dumps(args)
        ctx = ToolContext(context=None, tool_name=spec.name, tool_call_id="call_1", tool_arguments=text)
        return await tool.on_invoke_tool(ctx, text)

    return invoke


INVOKERS = {"langchain": langchain_invoker, "openai_agents": openai_agents_invoker}


@pytest.mark.parametrize("adapter", sorted(INVOKERS))
async def test_concurrent_identical_calls_share_one_approval_that_runs_once(adapter):
    fake = FakeGateway()
    spec = fake.add_tool("write_file", side_effect="write", policy="approval")
    memory = CountsCalls()
    transport = WaitsForCalls(fake, memory)
    invoke = INVOKERS[adapter](AsyncGatewayClient(transport=transport), spec, memory)

    transport.expected = 2
    texts = await asyncio.gather(invoke(ARGS), invoke(dict(reversed(ARGS.items()))))
    [approval] = fake.approvals()
    assert all(APPROVAL_ID.findall(t) == [approval.approval_id] for t in texts), texts
    asked, waiting = sorted(texts)
    assert asked.startswith("approval required") and waiting.startswith("approval still pending")
    assert fake.executions() == []

    fake.approve(approval.approval_id)
    transport.expected = 4
    retried = await asyncio.gather(invoke(ARGS), invoke(ARGS))
    assert len(fake.executions("write_file")) == 1
    [ran] = [t for t in retried if t.startswith('<tool_output tool="write_file"')]
    [again] = [t for t in retried if t is not ran]
    assert again.startswith("approval required") and approval.approval_id not in again, again
    assert [a.status for a in fake.approvals()] == ["executed", "pending"]
    assert len(memory) == 1  # the new request, for the next retry
