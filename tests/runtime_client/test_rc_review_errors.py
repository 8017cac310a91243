"""Client errors carry a stable snake_case ``code``, and an approval the gateway does not know is
``ApprovalNotFoundError`` (not a ``TransportError``, which a retrying caller would retry for ever).
Real gateway (demo config plus test tools) on 127.0.0.1 port 0, real SQLite checkpoints."""

from __future__ import annotations

import asyncio
import inspect
import re

import pytest

import runtime_client
from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, AuthenticationError, GatewayClient, GatewayTimeoutError,
    MalformedRequestError, StopReason, ToolCall, ToolgateClientError, TransportError, resume, run_agent,
)
from runtime_client import _errors
from tests.conftest import AGENT_KEY

SNAKE = re.compile(r"[a-z]+(_[a-z]+)*")


def _error_classes() -> list[type[ToolgateClientError]]:
    return [c for _, c in inspect.getmembers(_errors, inspect.isclass) if issubclass(c, ToolgateClientError)]


def test_every_client_error_class_has_its_own_stable_snake_case_code():
    classes = _error_classes()
    assert len(classes) >= 13
    codes = {c.__name__: c.__dict__.get("code") for c in classes}
    assert all(isinstance(code, str) and SNAKE.fullmatch(code) for code in codes.values()), codes
    assert len(set(codes.values())) == len(codes), codes  # each class its own
    assert codes["GatewayTimeoutError"] == "deadline_exceeded"
    assert codes["MalformedRequestError"] == "malformed_request"
    assert codes["CheckpointNotFoundError"] == "checkpoint_not_found"
    assert codes["ApprovalNotFoundError"] == "approval_not_found"
    assert codes["ClientClosedError"] == "client_closed"


def test_instances_keep_their_old_attributes_and_carry_the_code():
    timeout = GatewayTimeoutError("late", status="DEADLINE_EXCEEDED")
    assert timeout.code == "deadline_exceeded" and timeout.status == "DEADLINE_EXCEEDED"
    assert isinstance(timeout, TransportError)
    assert TransportError("x", status="UNAVAILABLE").code == "unavailable"
    assert TransportError("x").code == "transport_error" and TransportError("x").status == ""
    assert runtime_client.CheckpointNotFoundError("r").code == "checkpoint_not_found"
    assert runtime_client.CheckpointNotFoundError("r").run_id == "r"
    assert runtime_client.ApprovalNotFoundError("gone", approval_id="a").approval_id == "a"


async def test_grpc_failures_become_errors_with_codes(running):
    async with AsyncGatewayClient(running.address, api_key="not-a-key") as bad:
        with pytest.raises(AuthenticationError) as unauth:
            await bad.list_tools()
    assert unauth.value.code == "unauthenticated"
    async with AsyncGatewayClient(running.address, api_key="alice-approver-key") as approver:
        with pytest.raises(AuthenticationError) as denied:
            await approver.list_tools()  # an approver may not list tools
    assert denied.value.code == "permission_denied"
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        with pytest.raises(MalformedRequestError) as malformed:
            await gw.get_approval("")
    assert malformed.value.code == "malformed_request"
    address = running.address
    await running.stop()
    async with AsyncGatewayClient(address, api_key=AGENT_KEY, timeout=5) as gone:
        with pytest.raises(TransportError) as down:
            await gone.list_tools()
    assert down.value.code == "unavailable" and down.value.status == "UNAVAILABLE"


def _not_found(exc: BaseException, approval_id: str = "junk") -> None:
    """``exc`` says the approval is not there: not a transport failure a caller would retry."""
    assert not isinstance(exc, TransportError), repr(exc)
    assert isinstance(exc, runtime_client.ApprovalError) and type(exc).__name__ == "ApprovalNotFoundError"
    assert exc.code == "approval_not_found" and exc.approval_id == approval_id


async def test_an_unknown_approval_is_approval_not_found_not_a_transport_error(running):
    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        with pytest.raises(ToolgateClientError) as got:
            await gw.get_approval("junk")
        _not_found(got.value)
        with pytest.raises(ToolgateClientError) as waited:
            await gw.wait_for_approval("junk", timeout=5)
        _not_found(waited.value)
    await asyncio.to_thread(_sync_client_calls, running.address)  # the gateway runs on this loop


def _sync_client_calls(address: str) -> None:
    with GatewayClient(address, api_key=AGENT_KEY) as sync:
        with pytest.raises(ToolgateClientError) as got:
            sync.get_approval("junk")
        _not_found(got.value)
        with pytest.raises(ToolgateClientError) as waited:
            sync.wait_for_approval("junk", timeout=5)
        _not_found(waited.value)


async def test_resume_of_an_approval_another_tenant_cannot_see_is_approval_not_found(running, checkpoints):
    def decide(state):
        return ToolCall("write_file", {"path": "nf.txt", "content": "n"}) if not state.observations else Answer("ok")

    async with AsyncGatewayClient(running.address, api_key=AGENT_KEY) as gw:
        paused = await run_agent(AgentState(goal="nf"), decide, gw, checkpoints=checkpoints)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    approval_id = paused.state.pending_approvals[0].approval_id
    async with AsyncGatewayClient(running.address, api_key="other-tenant-key") as other:
        with pytest.raises(ToolgateClientError) as exc:
            await resume(paused.state.run_id, decide, other, checkpoints=checkpoints)
    _not_found(exc.value, approval_id)
    state, _ = checkpoints.load(paused.state.run_id)
    assert state.stop_reason is StopReason.AWAITING_APPROVAL  # the pause kept for the right caller


def test_the_fake_gateway_also_says_approval_not_found(fake):
    with pytest.raises(ToolgateClientError) as exc:
        fake.get_approval("junk")
    _not_found(exc.value)
