"""In-process micro-figures of single stages, each the median over rounds of a per-op p50.

- embedded policy decision on the default bundle (the engine's ``evaluate_sync``, input
  built by the gateway's own ``build_input``), and the input building alone;
- the engine's floor: the same ``evaluate_sync`` and input on a bundle whose decision is a
  constant (JSON in, regorus eval, JSON out, strict parse), so ``policy_decision_us`` minus
  it is what the default policy's own rules cost, a figure that drifts less with the machine;
- strict parse + JSON Schema validation; the RFC 8785 args hash;
- one audit record, and one executed call's worth (its 9 steps in an ``authorized`` record
  flushed before execution and a ``result`` record flushed after, as ``gateway.pipeline`` writes them);
- verifying a presented grant: ``tokens.verify`` exactly as the approval gate calls it for a
  grant signed by the gateway's grant key (header + Ed25519 signature, strict claims, time,
  binding to audience, approval, tool, tenant, run, agent and args hash), without the store
  lookup of the approval record and without the consume (the jti claim); and the signature
  check alone, which the gate also runs once before that lookup.

Each round times every figure once, in turn, so a slow spell of a shared machine lands in
one round of each figure rather than in all the samples of one.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from bench.scenarios import ARGS, REPO, SCHEMA

Op = tuple[Callable[[], Any], int]
"""A figure's operation and how many times one round times it."""

_CONSTANT_DECISION = """package toolgate

import rego.v1

decision := {"decision": "allow", "reasons": ["read-only tool"], "constraints": {}, "audit": "minimal"}
"""


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


def measure(ops: int, rounds: int = 5) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """All micro-figures (µs per operation): the median over ``rounds`` of each round's p50
    over about ``ops / rounds`` operations, and each figure's lowest and highest round."""
    per_round = max(ops // max(rounds, 1), 20)
    samples: dict[str, list[float]] = {}
    with ExitStack() as stack:
        figures = _operations(per_round, Path(stack.enter_context(tempfile.TemporaryDirectory())), stack)
        for _ in range(max(rounds, 1)):
            for name, (fn, count) in figures.items():
                samples.setdefault(name, []).append(_per_op_us(fn, count))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ranges = {name: (min(values), max(values)) for name, values in samples.items()}
    return medians, ranges


def _operations(ops: int, tmp: Path, stack: ExitStack) -> dict[str, Op]:
    """Every figure's operation, set up once (and checked to do what it is named for); what
    needs closing is closed by ``stack``."""
    import json

    from gateway import policy as policy_stage
    from gateway.arguments import args_hash, parse_strict
    from policies.embedded import EmbeddedEngine

    tool, ctx = _contexts()
    engine = EmbeddedEngine.from_bundle(REPO / "rego")
    floor_bundle = tmp / "floor"
    floor_bundle.mkdir()
    (floor_bundle / "decision.rego").write_text(_CONSTANT_DECISION)
    floor = EmbeddedEngine.from_bundle(floor_bundle)
    doc = policy_stage.build_input(ctx, "toolgate-bench")
    assert engine.evaluate_sync(doc) == floor.evaluate_sync(doc)  # the same answer, by rules or by a constant
    raw = json.dumps(ARGS).encode()
    figures: dict[str, Op] = {
        "policy_decision_us": (lambda: engine.evaluate_sync(doc), ops),
        "policy_engine_floor_us": (lambda: floor.evaluate_sync(doc), ops),
        "policy_input_us": (lambda: policy_stage.build_input(ctx, "toolgate-bench"), ops),
        "parse_strict_us": (lambda: parse_strict(raw, max_bytes=1 << 18), ops),
        "schema_validation_us": (lambda: tool.validator.errors(ARGS), ops),
        "args_hash_us": (lambda: args_hash(ARGS), ops),
    }
    figures.update(_audit(ctx, ops, tmp, stack))
    figures.update(_grant_verify(ctx, ops, tmp))
    return figures


def _audit(ctx: Any, ops: int, tmp: Path, stack: ExitStack) -> dict[str, Op]:
    from gateway.audit import AuditLog

    audit = AuditLog(tmp / "audit.jsonl", gateway_id="toolgate-bench")
    stack.callback(audit.close)
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

    return {
        "audit_record_us": (lambda: audit.record("policy", decision_id=ctx.decision_id, code="ok", **fields), ops),
        "audit_call_us": (one_call, max(ops // 4, 50)),
    }


def _grant_verify(ctx: Any, ops: int, tmp: Path) -> dict[str, Op]:
    """A grant as ``ApprovalService`` signs it, verified as ``ApprovalGate`` verifies it."""
    from gateway.approvals import tokens
    from gateway.approvals.config import ApprovalsConfig
    from gateway.approvals.keyring import load_grant_keys

    settings = ApprovalsConfig()
    gateway_id, ident = "toolgate-bench", ctx.identity
    keys = load_grant_keys(settings, tmp, gateway_id)  # generates the grant key file
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
        "grant_verify_us": (verify, ops),
        "grant_signature_check_us": (lambda: tokens.verify_signature(grant, typ=tokens.TYP_GRANT, keyring=keys.keyring), ops),
    }
