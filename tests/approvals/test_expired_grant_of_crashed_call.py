"""A grant whose call was orphaned by a crash, retried after the grant expired: answered from its
claim (``outcome_unknown`` once the claim is older than the tool's longest hold, audited
``abandoned``; before that ``invalid_approval`` saying from when), never executed; without a
claim, or tampered, or for other arguments, or for another agent, refused.

A real gateway over gRPC on 127.0.0.1 (port 0), on SQLite and on PostgreSQL. The crash is a
``grant`` claim written ``running`` under the grant's jti by no live call (as a killed gateway
leaves it), ``age`` seconds old; the grant's expiry is reached by moving the approval service's
clock (what verifies tokens). ``test_approved_call_killed_mid_run.py`` does it with a real kill.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from approval_helpers import AGENT, APPROVER, serving, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.approvals.keyring import write_private_key
from gateway.execute import longest_hold
from gateway.store.base import ClaimStatus
from gateway.testing import calls_recorded
from tests._postgres import pg_dsn, pg_server  # noqa: F401  (fixtures)

ARGS = '{"path": "out.txt", "n": 1}'
OTHER_ARGS = '{"path": "out.txt", "n": 2}'
DAY = 86400.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def gw(request, tmp_path: Path):
    """The demo gateway with count_write, on the store kind of the parameter."""
    config = write_config(tmp_path)
    if request.param == "postgres":
        key = tmp_path / "grant-signing.pem"  # a PostgreSQL gateway never generates its grant key
        write_private_key(key, Ed25519PrivateKey.generate())
        raw = yaml.safe_load(config.read_text())
        raw["store"] = {"kind": "postgres", "dsn": request.getfixturevalue("pg_dsn")}
        raw["approvals"]["grant_keys"] = [str(key)]
        config.write_text(yaml.safe_dump(raw))
    async with serving(config) as both:
        yield both


async def _granted(running: Any, c: Any) -> tuple[pb.Approval, str]:
    """An approved count_write request of the demo agent, and its grant."""
    asked = await c.call("count_write", ARGS)
    assert asked.code == "approval_required", asked
    a = await c.get(asked.approval_required.approval_id, APPROVER["alice"])
    await c.submit(a, "alice")
    mine = await c.get(a.approval_id, AGENT)
    assert mine.status == "approved" and mine.grant
    return mine, mine.grant


async def _crashed(running: Any, a: pb.Approval, grant: str, age: float) -> None:
    """The grant's call claimed it ``age`` seconds ago and its gateway died: the claim stays running."""
    store = running.app.store
    got = await store.claim("grant", tokens.unverified_claims(grant)["jti"], a.args_hash, time.time() - age)
    assert got.status is ClaimStatus.CLAIMED


def _expire(running: Any, grant: str) -> None:
    """Move the token clock past the grant's expiry (and the skew), not past its request's."""
    service = running.app.approvals.service
    service.clock = lambda: float(tokens.unverified_claims(grant)["exp"] + service.settings.clock_skew_seconds + 1)


async def _claim(running: Any, grant: str):
    return await running.app.store.get_claim("grant", tokens.unverified_claims(grant)["jti"])


def _executions(running: Any) -> int:
    return calls_recorded(Path(running.app.config.data_path) / "sandbox", "count_write")


def _records(running: Any, action: str) -> list[dict[str, Any]]:
    running.app.audit.flush()
    lines = Path(running.app.config.audit_path).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("action") == action]


def _lease(running: Any) -> float:
    return longest_hold(running.app.tools.resolve("count_write").config)


@pytest.mark.parametrize("first", ["approval_id", "approval_grant"])
async def test_an_expired_grant_whose_call_died_ends_outcome_unknown_and_never_runs(gw, first: str) -> None:
    running, c = gw
    a, grant = await _granted(running, c)
    await _crashed(running, a, grant, age=_lease(running) + 60)
    _expire(running, grant)
    by = {"approval_id": {"approval_id": a.approval_id}, "approval_grant": {"approval_grant": grant}}

    retry = await c.call("count_write", ARGS, **by[first])
    assert (retry.code, retry.replayed, retry.WhichOneof("outcome")) == ("outcome_unknown", True, "refused"), retry
    assert "whether the tool ran is unknown" in retry.refused.reasons[0]
    for fields in by.values():  # every later retry, either way: the same stored answer
        again = await c.call("count_write", ARGS, **fields)
        assert (again.code, again.replayed) == ("outcome_unknown", True), again

    assert _executions(running) == 0
    claim = await _claim(running, grant)
    assert claim.status is ClaimStatus.DONE and "outcome_unknown" in claim.outcome_json
    [abandoned] = _records(running, "grant_abandoned")
    assert (abandoned["code"], abandoned["abandoned"], abandoned["approval_id"]) == (
        "outcome_unknown", True, a.approval_id)
    assert abandoned["decision_id"] == retry.decision_id or not retry.decision_id
    assert len(_records(running, "grant_replayed")) == 2
    assert (await c.get(a.approval_id, AGENT)).status == "executed"  # its grant was used; no longer "approved"
    [executed] = [r for r in _records(running, "executed") if r.get("approval_id") == a.approval_id]
    assert (executed["code"], executed["abandoned"]) == ("outcome_unknown", True)


async def test_an_expired_grant_whose_call_may_still_run_is_not_executed(gw) -> None:
    running, c = gw
    a, grant = await _granted(running, c)
    await _crashed(running, a, grant, age=60)  # within the tool's longest hold: its call may be running
    _expire(running, grant)
    at = (await _claim(running, grant)).created + _lease(running)
    unknown_from = datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")
    for fields in ({"approval_id": a.approval_id}, {"approval_grant": grant}):
        retry = await c.call("count_write", ARGS, **fields)
        assert (retry.code, retry.replayed) == ("invalid_approval", False), retry  # as before, but it says
        assert f"a retry from {unknown_from} is answered outcome_unknown" in retry.refused.reasons[0]  # from when
        assert "a second approval would run it twice" in retry.refused.reasons[0]
    assert _executions(running) == 0
    assert (await _claim(running, grant)).status is ClaimStatus.RUNNING  # untouched
    assert len(_records(running, "grant_in_use")) == 2
    assert (await c.get(a.approval_id, AGENT)).status == "approved"


async def test_an_expired_grant_never_claimed_is_refused_as_expired(gw) -> None:
    running, c = gw
    a, grant = await _granted(running, c)
    _expire(running, grant)
    for fields in ({"approval_id": a.approval_id}, {"approval_grant": grant}):
        retry = await c.call("count_write", ARGS, **fields)
        assert retry.code == "approval_expired", retry
    assert _executions(running) == 0
    assert await _claim(running, grant) is None


def _tampered(grant: str) -> str:
    """``grant`` with its exp pushed a day on, its signature kept."""
    head, body, sig = grant.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["exp"] += int(DAY)
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{head}.{body}.{sig}"


@pytest.mark.parametrize("age", [60, DAY], ids=["claim_young", "claim_orphaned"])
async def test_a_tampered_expired_grant_is_refused_though_its_jti_was_claimed(gw, age: float) -> None:
    running, c = gw
    a, grant = await _granted(running, c)
    await _crashed(running, a, grant, age=age)
    _expire(running, grant)
    forged = _tampered(grant)
    for fields in ({"approval_grant": forged}, {"approval_grant": forged, "approval_id": a.approval_id}):
        retry = await c.call("count_write", ARGS, **fields)
        assert (retry.code, retry.replayed) == ("invalid_approval", False), retry
    assert _executions(running) == 0
    assert (await _claim(running, grant)).status is ClaimStatus.RUNNING  # not abandoned by a forged token
    assert _records(running, "grant_abandoned") == []


@pytest.mark.parametrize("age", [60, DAY], ids=["claim_young", "claim_orphaned"])
async def test_other_arguments_with_an_expired_claimed_grant_are_refused(gw, age: float) -> None:
    running, c = gw
    a, grant = await _granted(running, c)
    await _crashed(running, a, grant, age=age)
    _expire(running, grant)
    for fields in ({"approval_id": a.approval_id}, {"approval_grant": grant}):
        retry = await c.call("count_write", OTHER_ARGS, **fields)
        assert (retry.code, retry.replayed) == ("approval_args_mismatch", False), retry
    assert _executions(running) == 0
    assert (await _claim(running, grant)).status is ClaimStatus.RUNNING
    assert _records(running, "grant_abandoned") == []


async def test_an_expired_grant_of_another_agent_is_refused_though_its_jti_was_claimed(gw) -> None:
    """Only the expiry is excused: the grant is still bound to the agent (and user) it was issued to."""
    running, c = gw
    a, grant = await _granted(running, c)
    await _crashed(running, a, grant, age=DAY)
    _expire(running, grant)
    retry = await c.call("count_write", ARGS, key="other-tenant-key", approval_grant=grant)
    assert retry.code == "invalid_approval", retry
    assert (await _claim(running, grant)).status is ClaimStatus.RUNNING
