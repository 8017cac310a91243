"""``approvals list --status pending`` finds an older pending request behind 500 newer finished
ones: the service read the tenant's 500 newest requests of any status and filtered after, so the
request an approver had to act on was listed nowhere (nor in a Watch's current snapshot)."""

from __future__ import annotations

import time

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.config import load_config
from gateway.store.base import ApprovalStatus
from gateway.store.sqlite import SQLiteStore
from tests.approvals.approval_helpers import APPROVER, serving, write_config
from tests.store._records import record


async def test_a_pending_request_behind_500_finished_ones_is_listed(tmp_path):
    path = write_config(tmp_path)
    async with serving(path) as (_, c):
        legit = (await c.call("count_write", '{"n": -1}')).approval_required.approval_id
        store = SQLiteStore(load_config(path).store_path)  # 500 newer requests, finished
        try:
            now = time.time()
            for i in range(500):
                await store.create_approval(record(f"done-{i}", created_at=now + 1 + i, status=ApprovalStatus.REJECTED,
                                                   expires_at=now + 900))
        finally:
            await store.close()
        md = c.md(APPROVER["alice"])
        pending = await c.approvals.List(pb.ListApprovalsRequest(status="pending"), metadata=md, timeout=10)
        assert [a.approval_id for a in pending.approvals] == [legit]
        rejected = await c.approvals.List(pb.ListApprovalsRequest(status="rejected"), metadata=md, timeout=10)
        assert len(rejected.approvals) == 100 and rejected.next_page_token  # a page (100 unless asked)
