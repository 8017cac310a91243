"""In-process micro-figures of single stages, each the median over rounds of a per-op p50.

- embedded policy decision on the default bundle (the engine's ``evaluate_sync``, input
  built by the gateway's own ``build_input``), and the input building alone;
- strict parse + JSON Schema validation; the RFC 8785 args hash;
- one audit record, and one executed call's worth (its 9 steps in an ``authorized`` record
  flushed before execution and a ``result`` record flushed after, as ``gateway.pipeline`` writes them);
- verifying a presented grant: ``tokens.verify`` exactly as the approval gate calls it for a
  grant signed by the gateway's grant key (header + Ed25519 signature, strict claims, time,
  binding to audience, approval, tool, tenant, run, agent and args hash), without the store
  lookup of the approval record and without the consume (the jti claim); and the signature
  check alone, which the gate also runs once before that lookup.
"""

from __future__ import annotations

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

        ahead = ("authenticate", "resolve", "validate", "idempotency", "policy", "credentials", "admit")
        step_fields = {"resolve": {"tool": "noop", "tool_version": "1"}, "validate": {"args_hash": ctx.args_hash},
                       "idempotency": {"claimed": True},
                       "policy": {"decision": "allow", "reasons": ["read-only tool"], "policy_version": "sha256:0123456789abcdef"},
                       "execute": {"status": "ok", "duration_ms": 0, "attempts": 1, "error": "", "redactions": 0, "flags": []}}

        def one_call() -> None:
            steps = [{"stage": s, "code": "ok", **step_fields.get(s, {})} for s in ahead]
            audit.record("authorized", decision_id=ctx.decision_id, code="ok", tool="noop", args_hash=ctx.args_hash, steps=steps)
            audit.flush(anchor=False)
            audit.record("result", decision_id=ctx.decision_id, code="ok", tool="noop", args_hash=ctx.args_hash,
                         steps=[{"stage": "execute", "code": "ok", **step_fields["execute"]}], replayed=False,
                         executed=True, elapsed_ms=0.4)
            audit.flush()

        out["audit_record_us"] = _per_op_us(lambda: audit.record("policy", decision_id=ctx.decision_id, code="ok", **fields), ops)
        out["audit_call_us"] = _per_op_us(one_call, max(ops // 4, 50))
        audit.close()
    out.update(_grant_verify(ctx, ops))
    return out


def _grant_verify(ctx: Any, ops: int) -> dict[str, float]:
    """A grant as ``ApprovalService`` signs it, verified as ``ApprovalGate`` verifies it."""
    from gateway.approvals import tokens
    from gateway.approvals.config import ApprovalsConfig
    from gateway.approvals.keyring import load_grant_keys

    settings = ApprovalsConfig()
    gateway_id, ident = "toolgate-bench", ctx.identity
    with tempfile.TemporaryDirectory() as tmp:
        keys = load_grant_keys(settings, Path(tmp), gateway_id)  # generates the grant key file
    now = int(time.time())
    claims = {
        "iss": gateway_id, "sub": str(uuid.uuid4()), "aud": gateway_id, "tool": ctx.tool.name,
        "args_hash": ctx.args_hash, "tenant": ident.tenant, "run_id": ctx.call.run_id, "agent": ident.agent,
        "user": ident.user, "iat": now, "nbf": now, "exp": now + settings.grant_ttl_seconds, "jti": str(uuid.uuid4()),
        "approvers": ["bench-ops"], "groups": ["ops"],
    }
    grant = tokens.sign(claims, keys.signer, tokens.TYP_GRANT)
    expected = tokens.Expected(
        audience=gateway_id, approval_id=claims["sub"], tool=ctx.tool.name, tenant=ident.tenant,
        run_id=ctx.call.run_id, args_hash=ctx.args_hash, agent=ident.agent, user=ident.user,
    )
    limits = tokens.Limits(settings.clock_skew_seconds, settings.grant_ttl_seconds)

    def verify() -> tokens.Verified:
        return tokens.verify(grant, typ=tokens.TYP_GRANT, keyring=keys.keyring, expected=expected,
                             now=int(time.time()), limits=limits)

    assert verify().jti == claims["jti"]
    return {
        "grant_verify_us": _per_op_us(verify, ops),
        "grant_signature_check_us": _per_op_us(
            lambda: tokens.verify_signature(grant, typ=tokens.TYP_GRANT, keyring=keys.keyring), ops),
    }
