"""A request whose expiry passes while the call that used its grant runs: it ends ``executed``,
and no retry is told ``approval_expired`` (the advice to ask again, which would have a second
approval run the side effect twice). Over a real gRPC server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

import approval_helpers
from approval_helpers import AGENT, APPROVER, approval_token, serving, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.store.base import ApprovalStatus as S
from gateway.testing import calls_recorded, count_call

ARGS = '{"path": "out.txt", "n": 1}'
RELEASE: asyncio.Event | None = None
"""What a held_write call waits for once it has recorded itself; each test makes its own."""


async def held_write(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """count_write that runs on until the test lets it end."""
    count_call(args, ctx)
    await RELEASE.wait()
    return {"recorded": True}


def _config(tmp_path: Path) -> Path:
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["tools"].append({**approval_helpers.COUNT_WRITE, "name": "held_write",
                         "executor": {"kind": "python", "callable": f"{__name__}:held_write"}})
    path.write_text(yaml.safe_dump(raw))
    return path


async def _granted_near_expiry(running, c) -> tuple[pb.Approval, str]:
    """A held_write request approved 10 s before it expires: its grant lives to then (plus skew)."""
    service = running.app.approvals.service
    asked = await c.call("held_write", ARGS)
    a = await c.get(asked.approval_required.approval_id, APPROVER["alice"])
    at = a.expires_at.seconds - 10
    service.clock = lambda: float(at)
    token = approval_token(a, "alice", iat=at, exp=at + 300)
    await c.approvals.Submit(pb.SubmitApprovalRequest(approval_id=a.approval_id, token=token),
                             metadata=c.md(APPROVER["alice"]), timeout=10)
    mine = await c.get(a.approval_id, AGENT)
    assert mine.status == "approved" and mine.grant
    return mine, mine.grant


async def _running(running, c, grant: str) -> asyncio.Task:
    """The call with ``grant`` started, its tool running (recorded, waiting for RELEASE)."""
    first = asyncio.create_task(c.call("held_write", ARGS, approval_grant=grant))
    sandbox = Path(running.app.config.data_path) / "sandbox"
    for _ in range(500):
        if calls_recorded(sandbox, "held_write"):
            return first
        await asyncio.sleep(0.01)
    raise AssertionError("the held call never started")


@pytest.fixture
async def held(tmp_path: Path):
    """A held_write call running on a grant made 10 s before its request expires:
    (the gateway, its clients, the approval, the grant, the call's task)."""
    global RELEASE
    RELEASE = asyncio.Event()
    async with serving(_config(tmp_path)) as (running, c):
        a, grant = await _granted_near_expiry(running, c)
        first = await _running(running, c, grant)
        yield running, c, a, grant, first
        RELEASE.set()  # whatever the test did: the call ends before the gateway stops


def _executions(running) -> int:
    return calls_recorded(Path(running.app.config.data_path) / "sandbox", "held_write")


async def test_a_request_whose_expiry_passes_while_its_grant_runs_ends_executed(held) -> None:
    running, c, a, grant, first = held
    service = running.app.approvals.service
    service.clock = lambda: float(a.expires_at.seconds + 5)  # past the request's expiry, the grant's skew not
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "approved"  # an approver's view: in use
    retries = [asyncio.create_task(c.call("held_write", ARGS, **fields))  # they wait for the running call
               for fields in ({"approval_grant": grant}, {"approval_id": a.approval_id})]
    await asyncio.sleep(0.5)
    assert not any(r.done() for r in retries), [r.result() for r in retries if r.done()]
    RELEASE.set()
    done = await first
    assert (done.code, done.replayed) == ("ok", False), done
    for again in await asyncio.gather(*retries):
        assert (again.code, again.replayed) == ("ok", True), again
    assert (await c.get(a.approval_id, AGENT)).status == "executed"
    service.clock = lambda: float(a.expires_at.seconds + 1000)  # long after, the grant too
    for fields in ({"approval_grant": grant}, {"approval_id": a.approval_id}):
        assert (await c.call("held_write", ARGS, **fields)).code == "invalid_approval"
    assert _executions(running) == 1


async def test_a_request_expired_under_its_running_grant_is_recorded_executed(held) -> None:
    """A reader that looked for the grant's claim just before the call took it expires the request
    under the running call: a retry meanwhile is the opaque invalid_approval, and the call, once
    done, moves the request on to executed."""
    running, c, a, grant, first = held
    service = running.app.approvals.service
    assert await service.store.transition_approval(a.approval_id, from_status=S.APPROVED,
                                                   to_status=S.EXPIRED, now=service.clock())
    for fields in ({"approval_grant": grant}, {"approval_id": a.approval_id}):
        assert (await c.call("held_write", ARGS, **fields)).code == "invalid_approval"
    RELEASE.set()
    assert (await first).code == "ok"
    assert (await c.get(a.approval_id, AGENT)).status == "executed"
    again = await c.call("held_write", ARGS, approval_id=a.approval_id)  # the grant still lives: replayed
    assert (again.code, again.replayed) == ("ok", True), again
    assert _executions(running) == 1
