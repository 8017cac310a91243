"""The framework adapters answer a policy's ``require_more_evidence`` with an ``evidence``
provider, as ``run_agent`` does. Before, they could not: the model only heard "more evidence
required", so a tool whose policy wants evidence never ran through an adapter.

The default bundle wants a ``ticket_id`` for a refund above 1000, then two finance approvers.
Real gateway (demo config) on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
import json
import re
from contextlib import asynccontextmanager
from typing import Any

import pytest

from runtime_client import AsyncGatewayClient, EvidenceRequest
from tests.conftest import AGENT_KEY, audit_records
from tests.runtime_client.test_rc_adapter_approvals import vote

REFUND = {"order_id": "ORD-77", "amount": 5000}
TICKET = {"ticket_id": "T-77"}
APPROVAL_ID = re.compile(r"approval required \(approval_id=([^)]+)\)")
MISSING_TICKET = 'more evidence required: ["ticket_id"]'


class Sent:
    """The real client, recording the fields of every ExecuteTool it sends."""

    def __init__(self, client: AsyncGatewayClient) -> None:
        self.client, self.calls = client, []
        self.list_tools, self.get_approval = client.list_tools, client.get_approval

    async def execute(self, tool: str, args: dict[str, Any] | None = None, **fields: Any):
        self.calls.append(fields)
        return await self.client.execute(tool, args, **fields)


@pytest.fixture
async def sent(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as client:
        yield Sent(client)


@asynccontextmanager
async def langchain_invoke(client, **options):
    from runtime_client.adapters.langchain import langchain_tools

    tools = {t.name: t for t in await langchain_tools(client, **options)}

    async def invoke(name: str, args: dict) -> tuple[str, str]:
        return await tools[name].ainvoke(args), ""

    yield invoke


@asynccontextmanager
async def openai_agents_invoke(client, **options):
    from agents.tool_context import ToolContext

    from runtime_client.adapters.openai_agents import function_tools

    tools = {t.name: t for t in await function_tools(client, **options)}

    async def invoke(name: str, args: dict) -> tuple[str, str]:
        text = json.dumps(args)
        ctx = ToolContext(context=None, tool_name=name, tool_call_id="call_1", tool_arguments=text)
        return await tools[name].on_invoke_tool(ctx, text), ""

    yield invoke


@asynccontextmanager
async def mcp_invoke(client, **options):
    from mcp import Client

    from runtime_client.adapters.mcp import mcp_server

    async with Client(mcp_server(client, **options)) as mcp_client:
        async def invoke(name: str, args: dict) -> tuple[str, str]:
            result = await mcp_client.call_tool(name, args)
            code = (result.meta or {}).get("toolgate/code", "")
            assert result.is_error == (code != "ok"), (code, result)
            return result.content[0].text, code

        yield invoke


ADAPTERS = {"langchain": langchain_invoke, "openai_agents": openai_agents_invoke, "mcp": mcp_invoke}


def meta_code(adapter: str, code: str) -> str:
    """The outcome code the adapter shows beside the text: MCP's ``toolgate/code``, else none."""
    return code if adapter == "mcp" else ""


def _ledger(running) -> list[dict]:
    files = list(running.app.config.data_path.rglob("refunds.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def _evidence_at_policy(running) -> list[dict]:
    """The ``run.evidence`` the policy saw, for each refund decision the audit log recorded."""
    seen = []
    for record in audit_records(running.app.config.data_path / "audit.jsonl"):
        for step in record.get("steps", []):
            if step.get("stage") == "policy" and "policy_input" in step:
                seen.append(step["policy_input"]["run"].get("evidence", {}))
    return seen


class Provider:
    """An evidence provider that records what it is asked and gives ``gives`` (async)."""

    def __init__(self, gives: Any) -> None:
        self.gives, self.asked = gives, []

    async def __call__(self, request: EvidenceRequest) -> Any:
        self.asked.append(request)
        if isinstance(self.gives, Exception):
            raise self.gives
        return self.gives


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_a_refund_goes_through_with_evidence_and_two_approvals_and_runs_once(running, sent, adapter):
    provide = Provider(TICKET)
    async with ADAPTERS[adapter](sent, evidence=provide) as invoke:
        first, _ = await invoke("refund", REFUND)
        match = APPROVAL_ID.match(first)  # the policy's next ask, told as the adapter tells it today
        assert match, first
        assert "same call with the same arguments will proceed" in first
        assert [(a.tool, a.input, a.missing, a.given) for a in provide.asked] == [
            ("refund", REFUND, ("ticket_id",), {})]
        assert provide.asked[0].reasons == ("missing evidence: ticket_id",)
        asked, answered = sent.calls
        assert "evidence" not in asked and answered["evidence"] == TICKET
        assert answered["idempotency_key"] == asked["idempotency_key"]  # the same call, sent again

        pending, _ = await invoke("refund", REFUND)  # asked again before approval: still waits
        assert pending.startswith("approval still pending") and match.group(1) in pending, pending
        assert sent.calls[-1]["approval_id"] == match.group(1) and sent.calls[-1]["evidence"] == TICKET

        for approver in ("bob", "carol"):  # two finance approvers for a dual refund
            await vote(running.address, match.group(1), approver)
        done, _ = await invoke("refund", REFUND)
    assert done.startswith('<tool_output tool="refund" trust="untrusted">'), done
    assert sent.calls[-1]["approval_id"] == match.group(1) and sent.calls[-1]["evidence"] == TICKET
    assert len(provide.asked) == 1 and len(sent.calls) == 4  # the remembered evidence answered the later calls
    assert _ledger(running) == [{"order_id": "ORD-77", "amount": 5000, "currency": "EUR"}]
    assert (await sent.get_approval(match.group(1))).status == "executed"
    # the policy saw: the first send, the one with evidence, the approved one (a pending one stops before it)
    assert _evidence_at_policy(running) == [{}, TICKET, TICKET]


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_without_a_provider_the_model_hears_what_evidence_is_missing(running, sent, adapter):
    async with ADAPTERS[adapter](sent) as invoke:
        text, code = await invoke("refund", REFUND)
    assert text == MISSING_TICKET and code == meta_code(adapter, "evidence_required")
    assert len(sent.calls) == 1 and _ledger(running) == []


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_a_provider_that_gives_none_leaves_the_tool_error(running, sent, adapter):
    provide = Provider(None)
    async with ADAPTERS[adapter](sent, evidence=provide) as invoke:
        text, code = await invoke("refund", REFUND)
    assert text == MISSING_TICKET and code == meta_code(adapter, "evidence_required")
    assert len(provide.asked) == 1 and len(sent.calls) == 1  # nothing to send again with
    assert _ledger(running) == []


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_evidence_the_policy_still_finds_wanting_is_asked_for_once(running, sent, adapter):
    provide = Provider({"ticket_id": ""})  # empty: not present
    async with ADAPTERS[adapter](sent, evidence=provide) as invoke:
        text, code = await invoke("refund", REFUND)
    assert text == MISSING_TICKET and code == meta_code(adapter, "evidence_required")
    assert len(provide.asked) == 1 and len(sent.calls) == 2  # retried once, no more
    assert _ledger(running) == []


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_a_provider_that_raises_is_a_tool_error_not_a_crash(running, sent, adapter):
    provide = Provider(RuntimeError("ticket system down"))
    async with ADAPTERS[adapter](sent, evidence=provide) as invoke:
        text, code = await invoke("refund", REFUND)
        assert text.startswith('gateway error (evidence_provider_failed): the gateway asked for more '
                               'evidence (["ticket_id"])'), text
        assert "NOT executed" in text and "the provider raised RuntimeError" in text
        assert "ticket system down" not in text  # the application's own words stay with it (logged)
        assert code == meta_code(adapter, "evidence_provider_failed")
        provide.gives = TICKET  # the provider recovers: the model's retry asks it again and goes on
        again, _ = await invoke("refund", REFUND)
    assert APPROVAL_ID.match(again), again
    assert len(provide.asked) == 2 and _ledger(running) == []


@pytest.mark.parametrize("gives", [["T-77"], {"ticket_id": {1, 2}}, {"ticket_id": float("nan")}],
                         ids=["not_a_dict", "not_json", "nan"])
async def test_a_provider_that_gives_no_evidence_is_a_tool_error_not_a_crash(running, sent, gives):
    async with langchain_invoke(sent, evidence=lambda request: gives) as invoke:
        text, _ = await invoke("refund", REFUND)
    assert text.startswith("gateway error (evidence_provider_failed):"), text
    assert len(sent.calls) == 1 and _ledger(running) == []


async def test_a_sync_provider_is_called_as_run_agent_calls_it(running, sent):
    async with openai_agents_invoke(sent, evidence=lambda request: TICKET) as invoke:
        text, _ = await invoke("refund", REFUND)
    assert APPROVAL_ID.match(text), text


async def test_identical_concurrent_calls_ask_the_provider_once_and_share_one_approval(running, sent):
    provide = Provider(TICKET)
    async with langchain_invoke(sent, evidence=provide) as invoke:
        texts = [t for t, _ in await asyncio.gather(invoke("refund", REFUND), invoke("refund", REFUND))]
    first = next(t for t in texts if APPROVAL_ID.match(t))
    approval_id = APPROVAL_ID.match(first).group(1)
    other = texts[1 - texts.index(first)]
    assert other.startswith("approval still pending") and approval_id in other, texts
    assert len(provide.asked) == 1
