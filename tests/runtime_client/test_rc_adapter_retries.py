"""A call an adapter sent but never heard back from (a deadline, a dropped connection) may have
run at the gateway. The model will retry it, so the retry carries the same idempotency key and
hears the stored outcome instead of running the tool again; the next call made after an answer
is a new call. Real gateway (demo config plus test tools) on 127.0.0.1 port 0; only the first
answer is lost on its way back, after the gateway has run the call."""

from __future__ import annotations

import pytest

from runtime_client import ApprovalRequired, AsyncGatewayClient, Observation, Refused, ToolResult
from runtime_client._errors import GatewayTimeoutError
from runtime_client._grpc import AsyncGrpcTransport
from runtime_client.adapters import ApprovalMemory
from runtime_client.adapters._common import execute
from tests.conftest import AGENT_KEY
from tests.runtime_client.test_rc_adapter_approvals import ADAPTERS, gateway_testing, real  # noqa: F401

COUNTED = {"n": 7}


class LosesAnswers(AsyncGrpcTransport):
    """Sends each call to the gateway; the answers to the first ``lose`` calls never arrive."""

    def __init__(self, *args, lose: int = 1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lose = lose
        self.keys: list[str] = []

    async def execute(self, request):
        self.keys.append(request.idempotency_key)
        result = await super().execute(request)
        if self.lose:
            self.lose -= 1
            raise GatewayTimeoutError("deadline exceeded before the answer came")
        return result


@pytest.fixture
async def lossy(real):  # noqa: F811
    running, _ = real
    transport = LosesAnswers(running.address, AGENT_KEY)
    client = AsyncGatewayClient(transport=transport)
    try:
        yield running, client, transport
    finally:
        await client.close()


def executions(running) -> int:
    return gateway_testing.calls_recorded(running.app.config.data_path / "sandbox", "count_call")


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_a_retry_after_a_lost_answer_replays_the_outcome_instead_of_running_again(lossy, adapter):
    running, client, transport = lossy
    async with ADAPTERS[adapter](client) as invoke:
        lost = await invoke("count_call", COUNTED)  # a tool error the model sees, not an exception
        assert lost.startswith("gateway error (deadline_exceeded)"), lost
        assert executions(running) == 1  # it ran; the caller never heard
        retried = await invoke("count_call", COUNTED)
        assert retried.startswith('<tool_output tool="count_call"'), retried
        assert executions(running) == 1  # the stored outcome, not a second run
        again = await invoke("count_call", COUNTED)  # answered before: a new call
        assert again.startswith('<tool_output tool="count_call"'), again
        assert executions(running) == 2
    first, retry, new = transport.keys
    assert first and retry == first and new and new != first


def _result(code: str) -> ToolResult:
    if code == "ok":
        return ToolResult("t", Observation("ok", data={}), code)
    return ToolResult("t", Refused(code, ("r",)), code)


@pytest.mark.parametrize("code", ["execution_in_progress", "rate_limited", "concurrency_limited"])
async def test_an_approval_is_kept_while_its_call_is_still_running_or_was_only_held_back(code):
    memory = ApprovalMemory()
    key = memory.key("run", "t", {"a": 1})
    memory.update(key, ToolResult("t", ApprovalRequired("apr-1"), "approval_required"))
    memory.update(key, _result(code))
    assert memory.get(key) == "apr-1"
    memory.update(key, _result("approval_expired"))
    assert memory.get(key) == ""


class Answers:
    """A stand-in client: records the idempotency keys sent, answers with ``code``."""

    def __init__(self, code: str) -> None:
        self.code, self.keys = code, []

    async def execute(self, tool, args, **fields):
        self.keys.append(fields.get("idempotency_key", ""))
        return _result(self.code)


async def test_a_retry_answered_execution_in_progress_keeps_its_idempotency_key():
    """The first execution is still running at the gateway: a later retry must not run it anew."""
    memory, client = ApprovalMemory(), Answers("execution_in_progress")
    await execute(client, memory, "t", {"a": 1})
    await execute(client, memory, "t", {"a": 1})
    client.code = "ok"
    await execute(client, memory, "t", {"a": 1})
    await execute(client, memory, "t", {"a": 1})
    first, second, third, fourth = client.keys
    assert first and second == first and third == first and fourth != first
