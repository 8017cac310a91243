"""An approver's ``Watch`` with ``include_current`` reads its snapshot once the stream is live;
a change made while it is read is told once, never backwards: the snapshot shows the newer
state, and the events queued for the older ones are not heard after it (before, the client
heard ``current approved``, then ``requested pending``, a vote and ``granted`` again)."""

from __future__ import annotations

import asyncio

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from tests.approvals.approval_helpers import APPROVER, serving, write_config


async def test_a_change_made_while_the_snapshot_is_read_is_told_once_and_in_order(tmp_path):
    async with serving(write_config(tmp_path)) as (running, c):
        store = running.app.approvals.service.store
        read, go = store.approvals_page, asyncio.Event()

        async def held(**kw):  # the snapshot's read waits until the request is made and approved
            await go.wait()
            return await read(**kw)

        store.approvals_page = held
        stream = c.approvals.Watch(pb.WatchApprovalsRequest(include_current=True),
                                   metadata=c.md(APPROVER["alice"]), timeout=30)
        try:
            await stream.initial_metadata()  # live
            made = (await c.call("count_write", '{"n": 3}')).approval_required.approval_id
            assert (await c.submit(await c.get(made, APPROVER["alice"]), "alice")).status == "approved"
            go.set()
            heard = []
            while True:
                try:
                    event = await asyncio.wait_for(stream.read(), 3)
                except asyncio.TimeoutError:
                    break
                if event.approval.approval_id == made:
                    heard.append((event.type, event.approval.status))
            assert heard == [("current", "approved")]
        finally:
            stream.cancel()
