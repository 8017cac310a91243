"""The ``grant`` scenario: each call presents a fresh single-use grant for its exact arguments.

How the grants are made — before the timed window, through the real approval flow of the
gateway under test (nothing is written to its store or signed with its key by the bench):

1. the agent calls ``noop_write`` (side effect ``write``) with the scenario's args and a
   run id of its own; the default bundle answers ``require_approval`` (``ops``, quorum 1) and
   the gateway stores a pending request;
2. the approver identity ``bench-ops`` reads the request (``Approvals.Get``); the bench signs
   an approval of what it read (``toolgate-approval+jwt``, Ed25519) with this run's
   ``bench-ops`` key and submits it with ``Approvals.Submit``; quorum 1 is met, so the gateway
   signs a grant with its grant key;
3. the agent reads the grant with ``Approvals.Get``.

Minting grants with the gateway's grant key directly would not do: the gate accepts a grant
only when its jti is the one recorded for an approved request in the store. Each request gets
its own run id, because the gateway merges an identical pending request (same agent, run,
tool and args) into the existing one.

In the timed window every call sends the same args bytes as ``allow`` with a fresh
idempotency key, the grant's run id and the grant token: the gateway verifies the grant
(signature, then binding to audience, approval, tool, tenant, run, agent and args hash, expiry,
approvers against the current keyring), claims its jti (single use; the idempotency key is
claimed too, as in every scenario), executes and marks the approval executed. No grant is
presented twice, so a replayed answer is an error. Each run has a fresh gateway (see ``run``).
The supply for one run is sized from earlier runs at the same concurrency (``supply_for``); if
it runs out anyway the run ends early and throughput is taken over the time up to the last
answer (``exhausted`` says so, and the report counts such runs).
"""

from __future__ import annotations

import asyncio
import math
import shutil
import time
import uuid
from collections import deque
from typing import Any, Callable

import grpc

from bench import load
from bench.procs import ServerProcess
from bench.scenarios import (
    APPROVER, APPROVER_METADATA, GATEWAY_ID, METADATA, SCENARIOS, TENANT, args_json, approver_key, idempotency_key,
)
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc

class MintError(RuntimeError):
    """The approval flow did not produce a grant (the bench cannot run the scenario)."""


def supply_for(runs: dict[str, Any], concurrency: int, seconds: float, warmup: float) -> int:
    """Grants to make for one run: 1.3 x the best earlier grant run at this concurrency; in round 1
    the faster of allow's and deny's runs just before (the grant path does all allow does and
    more; deny guards against a slow first allow run on a shared machine)."""
    c = str(concurrency)
    done = [r["throughput"] for r in runs["grant"][c]]
    basis = 1.3 * max(done) if done else max(runs["allow"][c][-1]["throughput"], runs["deny"][c][-1]["throughput"])
    return math.ceil(basis * (seconds + warmup)) + concurrency


async def mint(address: str, count: int, concurrency: int = 32) -> deque[pb.ToolCallRequest]:
    """``count`` ready requests, each carrying its own grant (see the module docstring)."""
    scenario = SCENARIOS["grant"]
    args = args_json(scenario.name, scenario.args)
    run_prefix = f"grant-{uuid.uuid4().hex[:12]}"
    ready: deque[pb.ToolCallRequest] = deque()
    todo = iter(range(count))
    async with grpc.aio.insecure_channel(address) as channel:
        tools, approvals = pb_grpc.ToolGatewayStub(channel), pb_grpc.ApprovalsStub(channel)

        async def one(run_id: str) -> None:
            call = pb.ToolCallRequest(tool=scenario.tool, args_json=args, run_id=run_id, step=1)
            asked = await tools.ExecuteTool(call, metadata=METADATA, timeout=30)
            if asked.code != "approval_required":
                raise MintError(f"{scenario.tool} answered {asked.code!r}, not approval_required")
            approval_id = asked.approval_required.approval_id
            get = pb.GetApprovalRequest(approval_id=approval_id)
            seen = await approvals.Get(get, metadata=APPROVER_METADATA, timeout=30)  # what the approver signs
            token = approval_token(seen)
            submitted = pb.SubmitApprovalRequest(approval_id=approval_id, token=token)
            if (await approvals.Submit(submitted, metadata=APPROVER_METADATA, timeout=30)).status != "approved":
                raise MintError(f"approval {approval_id} not approved after the quorum")
            grant = (await approvals.Get(get, metadata=METADATA, timeout=30)).grant
            if not grant:
                raise MintError(f"approval {approval_id} has no grant for the requesting agent")
            call.idempotency_key = idempotency_key()
            call.approval_grant = grant
            ready.append(call)

        async def worker() -> None:
            for i in todo:
                await one(f"{run_prefix}-{i}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ready


def approval_token(a: pb.Approval) -> str:
    """``bench-ops``'s signed approval of request ``a``, bound to what the approver was shown."""
    from gateway.approvals import tokens

    if (a.audience, a.tenant) != (GATEWAY_ID, TENANT):
        raise MintError(f"approval {a.approval_id} is for {a.audience}/{a.tenant}")
    now = int(time.time())
    claims = {"iss": APPROVER, "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": a.args_hash,
              "tenant": a.tenant, "run_id": a.run_id, "iat": now, "exp": now + 600, "jti": str(uuid.uuid4())}
    return tokens.sign(claims, approver_key(), tokens.TYP_APPROVAL)


async def run(
    start_gateway: Callable[[], ServerProcess], concurrency: int, seconds: float, warmup: float, supply: int
) -> tuple[load.RunResult, dict[str, Any]]:
    """On a fresh gateway: make ``supply`` grants, then the timed closed loop presenting each once.

    A fresh gateway (same config as ``allow``'s) per run, because every request made leaves a
    row behind and the gateway's pending-request check scans all of them, so minting on a
    long-lived gateway slows down run after run (the timed path does not run that check)."""
    gw = start_gateway()
    try:
        t0 = time.perf_counter()
        ready = await mint(gw.address, supply)
        minted_s = time.perf_counter() - t0
        res = await load.closed_loop(gw.address, SCENARIOS["grant"], concurrency, seconds, warmup, gw.cpu,
                                     supply=lambda: ready.popleft() if ready else None)
    finally:
        gw.stop()
        shutil.rmtree(gw.workdir, ignore_errors=True)
    extra = {"grants_made": supply, "grants_unused": len(ready), "exhausted": float(not ready),
             "mint_seconds": minted_s}
    return res, extra
