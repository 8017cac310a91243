"""``toolgate demo``: a scripted agent (no model key) against a running demo gateway.

Stages: a read allowed → a destructive call refused → a write paused for approval →
(an approver signs it with ``toolgate approvals approve`` in another terminal) → resume runs
the approved write exactly once → success → trajectory eval → audit chain verification.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, TextIO

from gateway.cli._client import timeout_seconds
from gateway.cli._errors import fail
from gateway.terminal import shown
from runtime_client import (
    AgentState, Answer, AsyncGatewayClient, AuthenticationError, RunResult, SQLiteCheckpoints, StopReason,
    ToolCall, ToolgateClientError, TransportError, TrajectoryEval, resume, run_agent,
)
from runtime_client.testing import scripted_decide

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 4
WRITE = ToolCall("write_file", {"path": "demo/hello.txt", "content": "hello from the toolgate demo\n"})
WRITE_EVAL = TrajectoryEval(required_tools=("write_file",), forbidden_tools=("delete_file",),
                            expected_stop_reason=StopReason.SUCCESS, max_steps=3)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a scripted agent against a demo gateway",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=os.environ.get("TOOLGATE_TARGET", "127.0.0.1:50051"),
                   help="gateway address (default $TOOLGATE_TARGET or 127.0.0.1:50051)")
    p.add_argument("--api-key", default=os.environ.get("TOOLGATE_API_KEY", "demo-agent-key"),
                   help="agent API key (default $TOOLGATE_API_KEY or demo-agent-key)")
    p.add_argument("--checkpoints", default=os.environ.get("TOOLGATE_CHECKPOINTS", ".toolgate/demo.sqlite3"),
                   help="SQLite file for run checkpoints")
    p.add_argument("--approval-timeout", type=wait_seconds, default=300.0,
                   help="seconds to wait for the write's approval (0: do not wait; at most a year)")
    p.add_argument("--resume", default="", metavar="RUN_ID", help="resume a paused demo run")
    p.add_argument("--audit-log", default="", help="audit log to verify at the end")
    p.add_argument("--approver-key", default="", metavar="PEM",
                   help="sign the write's approval with this key, via `toolgate approvals approve` "
                   "in another process (demo only; e.g. examples/keys/alice.pem)")
    p.add_argument("--approver-api-key", default="", help="the approver's API key for --approver-key")
    p.set_defaults(func=run)


def wait_seconds(text: str) -> float:
    """``--approval-timeout``: 0 (do not wait) or ``timeout_seconds`` (argparse type)."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    return timeout_seconds(text)


def run(ns: argparse.Namespace) -> int:
    return asyncio.run(demo(ns, sys.stdout))


class _Out:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def stage(self, n: int, title: str) -> None:
        print(f"\n[{n}] {title}", file=self.stream, flush=True)

    def line(self, text: str) -> None:
        print(f"    {shown(text)}", file=self.stream, flush=True)  # summaries come from tool output

    def run(self, result: RunResult) -> None:
        s = result.state
        self.line(f"run {s.run_id}: stop={s.stop_reason.value if s.stop_reason else None} "
                  f"steps={s.steps} tools_called={s.tools_called}")
        for o in s.observations:
            if o.kind == "tool":
                self.line(f"  step {o.step}: {o.summary} [{o.code}]")

    def eval(self, spec: TrajectoryEval, state: AgentState) -> bool:
        verdict = spec.evaluate(state)
        self.line("eval: PASS" if verdict.passed else "eval: FAIL " + "; ".join(verdict.failures))
        return verdict.passed


async def demo(ns: argparse.Namespace, stream: TextIO) -> int:
    out = _Out(stream)
    try:
        async with AsyncGatewayClient(ns.target, api_key=ns.api_key) as gw:
            store = SQLiteCheckpoints(ns.checkpoints)
            if ns.resume:
                return await _finish(out, gw, store, ns, ns.resume, stage=1)
            out.stage(1, f"connect to {ns.target}")
            tools = await gw.list_tools()
            out.line("tools: " + ", ".join(f"{t.name}({t.risk.side_effect})" for t in tools))
            ok = await _read(out, gw, store) & await _destructive(out, gw, store)
            run_id = await _write(out, gw, store)
            if run_id is None:
                return EXIT_FAILED
            if ns.approver_key and not await _approve_in_other_process(out, ns, run_id, store):
                return EXIT_FAILED
            code = await _finish(out, gw, store, ns, run_id, stage=5)
            return code if ok or code != EXIT_OK else EXIT_FAILED
    except ToolgateClientError as exc:
        code = ("gateway_unreachable" if isinstance(exc, TransportError) else
                "unauthenticated" if isinstance(exc, AuthenticationError) else "demo_failed")
        return fail(code, f"{type(exc).__name__}: {exc} (is the demo gateway running at --target?)")


async def _read(out: _Out, gw: AsyncGatewayClient, store: Any) -> bool:
    out.stage(2, "a read is allowed: lookup_policy, then answer")
    decide = scripted_decide(ToolCall("lookup_policy", {"topic": "refunds"}),
                             Answer("Refunds follow the policy I looked up."))
    result = await run_agent(AgentState(goal="What is the refund policy?", max_steps=3), decide, gw,
                             checkpoints=store)
    out.run(result)
    out.line("trace: " + " → ".join(e.type for e in result.trace))
    return out.eval(TrajectoryEval(required_tools=("lookup_policy",), forbidden_tools=("write_file",),
                                   expected_stop_reason=StopReason.SUCCESS, max_steps=2), result.state)


async def _destructive(out: _Out, gw: AsyncGatewayClient, store: Any) -> bool:
    out.stage(3, "a destructive call is refused: delete_file")
    result = await run_agent(AgentState(goal="Clean up the workspace", max_steps=2),
                             lambda s: ToolCall("delete_file", {"path": "demo/hello.txt"}), gw,
                             checkpoints=store)
    out.run(result)
    return out.eval(TrajectoryEval(expected_stop_reason=StopReason.REFUSED), result.state)


async def _write(out: _Out, gw: AsyncGatewayClient, store: Any) -> str | None:
    out.stage(4, "a write pauses for approval: write_file")
    result = await run_agent(AgentState(goal="Write the greeting file", max_steps=3),
                             scripted_decide(WRITE, Answer("The file is written.")), gw,
                             checkpoints=store)
    out.run(result)
    if result.stop_reason is not StopReason.AWAITING_APPROVAL:
        out.line(f"expected awaiting_approval, got {result.stop_reason}")
        return None
    pending = result.state.pending_approvals[0]
    out.line(f"approval {pending.approval_id} pending; nothing was executed.")
    out.line("approve it in another terminal (an ops approver):")
    out.line(f"  toolgate approvals approve {pending.approval_id} --key <approver-key.pem>")
    return result.state.run_id


async def _approve_in_other_process(out: _Out, ns: argparse.Namespace, run_id: str, store: Any) -> bool:
    """The approver's step, run as a separate `toolgate approvals approve` process."""
    state, _ = store.load(run_id)
    approval_id = state.pending_approvals[0].approval_id
    out.line(f"approver (another process): toolgate approvals approve {approval_id} --key {ns.approver_key} --yes")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "approvals", "approve", approval_id, "--key", ns.approver_key, "--yes",
        "--api-key", ns.approver_api_key, "--target", ns.target,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(proc.communicate(), 60)
    last = output.decode().strip().splitlines()[-1:] or [""]
    out.line(f"approver exited {proc.returncode}: {last[0]}")
    return proc.returncode == 0


async def _finish(out: _Out, gw: AsyncGatewayClient, store: Any, ns: argparse.Namespace,
                  run_id: str, stage: int) -> int:
    out.stage(stage, f"resume run {run_id} once approved"
              + (f" (waiting up to {ns.approval_timeout:g}s)" if ns.approval_timeout else ""))
    result = await resume(run_id, scripted_decide(Answer("The file is written.")), gw,
                          checkpoints=store, wait=ns.approval_timeout or None)
    out.run(result)
    if result.stop_reason is StopReason.AWAITING_APPROVAL:
        out.line(f"still waiting; later run: toolgate demo --resume {run_id}")
        return EXIT_PAUSED
    out.stage(stage + 1, "trajectory eval of the write run")
    passed = out.eval(WRITE_EVAL, result.state)
    audit_ok = _verify_audit(out, ns.audit_log, stage + 2)
    return EXIT_OK if passed and audit_ok else EXIT_FAILED


def _verify_audit(out: _Out, path: str, stage: int) -> bool:
    out.stage(stage, "audit verification")
    if not path:
        out.line("skipped: pass --audit-log <data_dir>/audit.jsonl (or run `toolgate audit verify`)")
        return True
    from gateway.audit_verify import verify_file

    report = verify_file(path)
    out.line(f"ok: {report.records} records, chain intact" if report.ok
             else f"BROKEN at line {report.line}: {report.reason}")
    return bool(report.ok)
