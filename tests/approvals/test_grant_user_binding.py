"""A grant is the user's, not just the agent's: two keys may share an agent id and act for
different users, and the approver saw "for user dana". Over a real gRPC server."""

from __future__ import annotations

import hashlib

import grpc
import pytest
import yaml

from approval_helpers import AGENT, APPROVER, serving, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.testing import calls_recorded

ARGS = '{"path": "dana.txt", "n": 1}'
ERIN = "erin-agent-key"  # the same agent id as the demo agent, acting for erin


@pytest.fixture
async def two_users(tmp_path):
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["identities"] += [
        {"name": "erin", "api_key_sha256": hashlib.sha256(ERIN.encode()).hexdigest(), "tenant": "acme",
         "agent": "demo-agent", "user": "erin", "roles": ["agent"]},
    ]
    path.write_text(yaml.safe_dump(raw))
    async with serving(path) as both:
        yield both


async def test_a_grant_made_for_dana_does_not_run_for_erin(two_users) -> None:
    running, c = two_users
    asked = await c.call("count_write", ARGS)
    approval_id = asked.approval_required.approval_id
    a = await c.get(approval_id, APPROVER["alice"])
    assert (a.agent, a.user) == ("demo-agent", "dana")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.get(approval_id, ERIN)  # not erin's request: she cannot read it, nor its grant
    assert err.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED)
    assert (await c.submit(a, "alice")).status == "approved"
    grant = (await c.get(approval_id, AGENT)).grant
    assert tokens.unverified_claims(grant)["user"] == "dana"
    by_id = await c.call("count_write", ARGS, key=ERIN, approval_id=approval_id)
    by_grant = await c.call("count_write", ARGS, key=ERIN, approval_grant=grant)
    assert (by_id.code, by_grant.code) == ("invalid_approval", "invalid_approval")
    assert calls_recorded(running.app.config.data_path / "sandbox", "count_write") == 0
    mine = await c.call("count_write", ARGS, approval_grant=grant)  # dana's agent: runs, once
    assert (mine.code, mine.replayed) == ("ok", False)


async def test_an_approver_key_cannot_call_or_list_tools(two_users) -> None:
    running, c = two_users
    refused = await c.call("list_dir", '{"path": "."}', key=APPROVER["bob"])
    assert refused.code == "permission_denied" and "agent role" in refused.refused.reasons[0]
    assert (await c.call("count_write", ARGS, key=APPROVER["bob"])).code == "permission_denied"  # no request made
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.tools.ListTools(pb.ListToolsRequest(), metadata=c.md(APPROVER["bob"]), timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    listed = await c.approvals.List(pb.ListApprovalsRequest(), metadata=c.md(APPROVER["alice"]), timeout=10)
    assert list(listed.approvals) == []
