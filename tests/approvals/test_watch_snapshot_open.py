"""An approver's ``Watch`` starts from every request still open, not the 500 newest of any
status: an older pending request behind 500 newer finished ones was neither sent as current
nor known to the stream, so its expiry was never heard."""

from __future__ import annotations

import asyncio
import time

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.config import load_config
from gateway.store.base import ApprovalStatus
from gateway.store.sqlite import SQLiteStore
from tests.approvals.approval_helpers import APPROVER, serving, write_config
from tests.store._records import record

S = ApprovalStatus


async def _fill(path, *, now: float) -> None:
    """An open request made long ago that expires in two seconds, then 520 newer finished ones."""
    store = SQLiteStore(load_config(path).store_path)
    try:
        await store.create_approval(record("old-open", created_at=now - 60, expires_at=now + 2))
        for i in range(520):
            await store.create_approval(record(f"done-{i}", created_at=now - 50 + i / 100, status=S.REJECTED,
                                               expires_at=now + 900))
    finally:
        await store.close()


def _watch(c, include_current: bool):
    return c.approvals.Watch(pb.WatchApprovalsRequest(include_current=include_current),
                             metadata=c.md(APPROVER["alice"]), timeout=30)


async def _until(stream, approval_id: str, seconds: float) -> pb.ApprovalEvent:
    async def first() -> pb.ApprovalEvent:
        while True:
            event = await stream.read()
            assert event is not grpc.aio.EOF, "the stream ended"
            if event.approval.approval_id == approval_id:
                return event
    return await asyncio.wait_for(first(), seconds)


async def test_the_snapshot_is_every_open_request_and_nothing_finished(tmp_path):
    path = write_config(tmp_path)
    async with serving(path) as (_, c):
        legit = (await c.call("count_write", '{"n": -1}')).approval_required.approval_id
        await _fill(path, now=time.time())
        stream = _watch(c, include_current=True)
        try:
            await stream.initial_metadata()
            current = []
            while len(current) < 2:
                event = await asyncio.wait_for(stream.read(), 10)
                assert event.type == "current", event
                current.append(event.approval.approval_id)
            assert current == [legit, "old-open"]  # newest first; none of the 520 finished ones
            expired = await _until(stream, "old-open", 10)
            assert (expired.type, expired.approval.status) == ("expired", "expired")
        finally:
            stream.cancel()


async def test_a_stream_without_the_snapshot_still_hears_an_old_request_expire(tmp_path):
    path = write_config(tmp_path)
    async with serving(path) as (_, c):
        await _fill(path, now=time.time())
        stream = _watch(c, include_current=False)
        try:
            await stream.initial_metadata()
            expired = await _until(stream, "old-open", 10)
            assert (expired.type, expired.approval.status) == ("expired", "expired")
        finally:
            stream.cancel()
