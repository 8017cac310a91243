"""In-process micro-figures of single stages, each the median over rounds of a per-op p50.

- embedded policy decision on the default bundle (the engine's ``evaluate_sync``, input
  built by the gateway's own ``build_input``), and the input building alone;
- strict parse + JSON Schema validation; the RFC 8785 args hash;
- one audit record, and one call's worth (8 records + flush);
- grant verification when ``gateway.approvals`` exists (else reported as not measured).
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from bench.scenarios import ARGS, REPO, SCHEMA


def _per_op_us(fn: Callable[[], Any], ops: int, batch: int = 1) -> float:
    """p50 over ``ops`` timed runs of ``fn`` (each doing ``batch`` operations), in µs per op."""
    samples = []
    for _ in range(ops):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples) * 1e6


def _contexts() -> tuple[Any, Any]:
    from gateway.arguments import args_hash
    from gateway.config import ToolConfig
    from gateway.models import CallContext, Identity, ToolCall
    from gateway.tools import ToolRegistry

    tools = ToolRegistry([ToolConfig.model_validate({
        "name": "noop", "input_schema": SCHEMA, "risk": {"side_effect": "read"},
        "executor": {"kind": "python", "callable": "bench.tools:noop"},
    })])
    tool = tools.resolve("noop")
    ctx = CallContext(str(uuid.uuid4()), Identity("bench", "bench-agent", "bench-user"),
                      ToolCall("noop", b"{}", run_id="bench-run", step=1), time.monotonic())
    ctx.tool, ctx.args, ctx.args_hash = tool, dict(ARGS), args_hash(ARGS)
    return tool, ctx


def measure(ops: int) -> dict[str, Any]:
    """All micro-figures (µs per operation, p50)."""
    import json

    from gateway import policy as policy_stage
    from gateway.arguments import args_hash, parse_strict
    from gateway.audit import AuditLog
    from policies.embedded import EmbeddedEngine

    tool, ctx = _contexts()
    engine = EmbeddedEngine.from_bundle(REPO / "rego")
    doc = policy_stage.build_input(ctx, "toolgate-bench")
    assert engine.evaluate_sync(doc).decision == "allow"
    raw = json.dumps(ARGS).encode()
    out: dict[str, Any] = {
        "policy_decision_us": _per_op_us(lambda: engine.evaluate_sync(doc), ops),
        "policy_input_us": _per_op_us(lambda: policy_stage.build_input(ctx, "toolgate-bench"), ops),
        "parse_strict_us": _per_op_us(lambda: parse_strict(raw, max_bytes=1 << 18), ops),
        "schema_validation_us": _per_op_us(lambda: tool.validator.errors(ARGS), ops),
        "args_hash_us": _per_op_us(lambda: args_hash(ARGS), ops),
    }
    with tempfile.TemporaryDirectory() as tmp:
        audit = AuditLog(Path(tmp) / "audit.jsonl", gateway_id="toolgate-bench")
        fields = {"tool": "noop", "args_hash": ctx.args_hash, "policy_version": "sha256:0123456789abcdef"}

        def one_call() -> None:
            for stage in ("authenticate", "resolve", "validate", "idempotency", "policy", "credentials", "execute", "result"):
                audit.record(stage, decision_id=ctx.decision_id, code="ok", **fields)
            audit.flush()

        out["audit_record_us"] = _per_op_us(lambda: audit.record("policy", decision_id=ctx.decision_id, code="ok", **fields), ops)
        out["audit_call_us"] = _per_op_us(one_call, max(ops // 8, 50))
        audit.close()
    out["grant_verify_us"] = _grant_verify(ops)
    return out


def _grant_verify(ops: int) -> float | None:
    """Not measured yet: ``gateway.approvals`` landed while issue F was in progress."""
    if importlib.util.find_spec("gateway.approvals") is None:
        return None
    return None  # TODO(issue F): wire in once the approvals module exposes grant verification
