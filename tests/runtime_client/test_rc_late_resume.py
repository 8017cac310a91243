"""A resume after the grant's time-to-live has passed stops the run ``blocked`` (it needs a new
approval), not ``refused``: the gateway answers ``approval_expired`` for a grant used late,
and the runtime counts that with the other refusals a run can come back from. Real gateway
(demo config plus the counting write tool) on 127.0.0.1 port 0."""

from __future__ import annotations

from runtime_client import AgentState, Answer, AsyncGatewayClient, MemoryCheckpoints, ToolCall, resume, run_agent
from runtime_client.testing import scripted_decide
from tests.approvals.approval_helpers import AGENT, APPROVER, serving, write_config


async def test_a_late_resume_stops_blocked_with_approval_expired(tmp_path):
    async with serving(write_config(tmp_path)) as (running, c):
        checkpoints = MemoryCheckpoints()
        async with AsyncGatewayClient(running.address, api_key=AGENT) as gateway:
            paused = await run_agent(AgentState(goal="write"), scripted_decide(ToolCall("count_write", {"n": 1})),
                                     gateway, checkpoints=checkpoints)
            assert paused.stop_reason.value == "awaiting_approval"
            [pending] = paused.state.pending_approvals
            a = await c.get(pending.approval_id, APPROVER["alice"])
            assert (await c.submit(a, "alice")).status == "approved"
            service = running.app.approvals.service
            late = a.created_at.seconds + service.settings.grant_ttl_seconds + service.settings.clock_skew_seconds + 1
            service.clock = lambda: float(late)
            done = await resume(paused.state.run_id, scripted_decide(Answer("written")), gateway,
                                checkpoints=checkpoints)
        assert done.stop_reason.value == "blocked"
        assert [o.code for o in done.state.observations if o.kind == "tool"][-1] == "approval_expired"
