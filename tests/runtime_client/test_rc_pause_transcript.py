"""After an approval pause the model is told about every call it issued: the real result of
the approved call, and a typed ``not_run`` note for a call of the same decision that the pause
kept from running."""

from __future__ import annotations

from runtime_client import AgentState, Answer, StopReason, ToolCall, ToolCalls, resume, run_agent

WRITE = ToolCall("write_file", {"path": "notes.txt", "content": "hello"})
READ = ToolCall("read_file", {"path": "other.txt"})


async def test_a_call_skipped_by_an_approval_pause_is_reported_to_the_model_on_resume(
        fake, gateway, memory_checkpoints):
    seen = []

    def decide(state, context):
        seen.append(context.messages)
        return ToolCalls((WRITE, READ)) if len(seen) == 1 else Answer("done")

    paused = await run_agent(AgentState(goal="write, then read"), decide, gateway,
                             checkpoints=memory_checkpoints)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert fake.executions() == []
    [note] = [o for o in paused.state.observations if o.code == "not_run"]
    assert (note.kind, note.tool, note.status) == ("runtime", "read_file", "skipped")
    assert note.data == {"input": READ.input, "reason": "awaiting_approval"}

    fake.approve(paused.state.pending_approvals[0].approval_id)
    done = await resume(paused.state.run_id, decide, gateway, checkpoints=memory_checkpoints)
    assert done.stop_reason is StopReason.SUCCESS
    assert [c.tool for c in fake.executions()] == ["write_file"]

    shown = [m["content"] for m in seen[-1]]
    [written] = [c for c in shown if c.startswith('<tool_output tool="write_file"')]
    [skipped] = [c for c in shown if "read_file" in c]
    assert skipped.startswith("[runtime] read_file") and "was not run" in skipped
    assert '"other.txt"' in skipped and "approval" in skipped
    assert "call it again" in skipped
