"""The policy stage: build the input document, ask the engine, read the decision strictly.

Errors and timeouts deny (``policy_unavailable``); a malformed or undefined decision denies
(``policy_invalid_decision``). The engine's parsing is in ``policies``; this module only knows
the gateway's side of the contract.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from policies import PolicyDecision, PolicyEngine, PolicyError

from gateway.models import CallContext, Identity


def caller_view(identity: Identity) -> dict[str, str]:
    """The ``caller`` part of the policy input: authenticated, so policy may trust it."""
    return {"tenant": identity.tenant, "agent": identity.agent, "user": identity.user}


def build_input(ctx: CallContext, gateway_id: str) -> dict[str, Any]:
    """The policy input document from DESIGN.md. Caller fields are authenticated; run is not."""
    doc: dict[str, Any] = {
        "caller": caller_view(ctx.identity),
        "tool": ctx.tool.policy_view(),
        "args": ctx.args,
        "args_hash": ctx.args_hash,
        "run": {"id": ctx.call.run_id, "step": ctx.call.step, "evidence": ctx.evidence},
        "environment": {"gateway_id": gateway_id, "time": datetime.now(timezone.utc).isoformat()},
    }
    if ctx.approval is not None:
        doc["approval"] = {"approvers": list(ctx.approval.approvers), "groups": list(ctx.approval.groups)}
    return doc


async def decide(engine: PolicyEngine, doc: dict[str, Any], timeout_ms: int) -> PolicyDecision:
    """Evaluate; raise PolicyError (fail closed) on error, timeout or a malformed decision.

    An engine that evaluates inline (``engine.inline``: the embedded one never awaits, so no
    asyncio timeout could fire) enforces ``timeout_ms`` itself. So does one whose own wait is
    bounded by no more than ``timeout_ms`` (``engine.wait_bound_ms``: the OPA engine's, on its
    HTTP exchange); a second timer around it would cost a timer per call and catch nothing.
    The others get one here.
    """
    try:
        bound = getattr(engine, "wait_bound_ms", None)
        if getattr(engine, "inline", False) or (type(bound) is int and 0 < bound <= timeout_ms):
            return await engine.evaluate(doc)
        async with asyncio.timeout(timeout_ms / 1000):  # no extra task per call, unlike wait_for
            return await engine.evaluate(doc)
    except TimeoutError as exc:
        raise PolicyError("policy_unavailable", f"policy evaluation exceeded {timeout_ms} ms") from exc
    except PolicyError:
        raise
    except Exception as exc:  # any engine failure is a denial, never an allow
        raise PolicyError("policy_unavailable", f"{type(exc).__name__}: {exc}") from exc
