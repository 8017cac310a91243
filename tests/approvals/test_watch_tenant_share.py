"""``Approvals.Watch`` streams are shared between tenants: one tenant holds at most
``limits.max_watch_streams_per_tenant`` of the process's ``max_watch_streams``. Before, one
tenant that opened every stream the process allows (approver streams, or an agent's streams
on its own requests) left every other tenant's approvers and agents none."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from tests.approvals.approval_helpers import AGENT, APPROVER, OTHER_TENANT, serving, write_config

LIMITS = {"max_watch_streams": 4, "max_watch_streams_per_tenant": 2}


async def _open(c, key: str, approval_id: str = ""):
    stream = c.approvals.Watch(pb.WatchApprovalsRequest(approval_id=approval_id), metadata=c.md(key), timeout=30)
    await asyncio.wait_for(stream.initial_metadata(), 10)  # live, or refused
    if stream.done():
        await stream.read()  # raises the refusal
    return stream


async def test_one_tenant_cannot_take_every_watch_stream(tmp_path):
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw.setdefault("limits", {}).update(LIMITS)
    path.write_text(yaml.safe_dump(raw))
    async with serving(path) as (_, c):
        held = [await _open(c, APPROVER["alice"]), await _open(c, APPROVER["bob"])]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _open(c, APPROVER["carol"])
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "for your tenant" in refused.value.details() and "max_watch_streams_per_tenant" in refused.value.details()
        # the other tenant still has room
        theirs = (await c.call("count_write", '{"n": 1}', key=OTHER_TENANT)).approval_required.approval_id
        assert theirs
        held.append(await _open(c, OTHER_TENANT, theirs))
        held.pop(0).cancel()  # a closed stream gives its tenant's place back
        await asyncio.sleep(0.2)
        held.append(await _open(c, APPROVER["carol"]))
        for stream in held:
            stream.cancel()


async def test_a_tenants_agents_cannot_take_its_approvers_streams(tmp_path):
    """An agent watching its own request over and over held its tenant's whole share, and the
    tenant's approvers could watch nothing; approvers and agents now have a share each."""
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw.setdefault("limits", {}).update(LIMITS)
    path.write_text(yaml.safe_dump(raw))
    async with serving(path) as (_, c):
        mine = (await c.call("count_write", '{"n": 1}')).approval_required.approval_id
        held = [await _open(c, AGENT, mine), await _open(c, AGENT, mine)]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _open(c, AGENT, mine)
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "for your tenant's agents" in refused.value.details()
        held.append(await _open(c, APPROVER["alice"]))  # the approvers' share is whole
        held.append(await _open(c, APPROVER["bob"]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _open(c, APPROVER["carol"])
        assert "for your tenant's approvers" in refused.value.details()
        for stream in held:
            stream.cancel()
