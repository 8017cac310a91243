"""Token vectors (tests/vectors/tokens/, data files): each case verified with a fixed ``now``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.approvals import tokens
from gateway.approvals.config import ApprovalsConfig
from gateway.approvals.keyring import GrantKeys, SigningKey, approver_keyring
from gateway.approvals.service import ApprovalService, Refusal
from gateway.arguments import args_hash, parse_strict
from gateway.audit import AuditLog
from gateway.models import Identity
from gateway.store.base import ApprovalRecord, ApprovalStatus
from gateway.store.sqlite import SQLiteStore

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "tokens"
KEYRING = json.loads((VECTORS / "keyring.json").read_text())
SETTINGS = ApprovalsConfig(
    approvers=KEYRING["approvers"], clock_skew_seconds=KEYRING["skew"],
    max_approval_lifetime_seconds=KEYRING["max_lifetime"],
)


def _load(folder: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((VECTORS / folder).glob("*.json"))]


def _expected(case: dict[str, Any]) -> tokens.Expected:
    req = {k: v for k, v in case["request"].items() if k != "quorum"}
    presented = args_hash(parse_strict(case["presented"].encode(), max_bytes=1 << 20))
    return tokens.Expected(**{**req, "groups_any": tuple(req["groups_any"]), "not_issuers": tuple(req["not_issuers"])},
                           args_hash=presented)


def _verify(case: dict[str, Any]) -> str:
    try:
        tokens.verify(case["token"], typ=case["typ"], keyring=approver_keyring(SETTINGS), expected=_expected(case),
                      now=case["now"], limits=tokens.Limits(SETTINGS.clock_skew_seconds, SETTINGS.max_approval_lifetime_seconds))
    except tokens.TokenRejected as exc:
        assert str(exc) == "invalid approval"  # opaque whatever the reason
        assert exc.reason
        return str(exc.code)
    return "ok"


def test_vector_set_is_complete() -> None:
    names = {c["name"] for c in _load("single")}
    assert len(names) >= 30 and {"valid", "alg_none_with_signature", "hs256_with_raw_public_key", "self_approval"} <= names


@pytest.mark.parametrize("case", _load("single"), ids=lambda c: c["name"])
def test_single_token_vector(case: dict[str, Any]) -> None:
    assert _verify(case) == case["expect"]


@pytest.mark.parametrize("case", _load("quorum"), ids=lambda c: c["name"])
async def test_quorum_vector(case: dict[str, Any], tmp_path: Path) -> None:
    store, audit = SQLiteStore(tmp_path / "db.sqlite"), AuditLog(tmp_path / "audit.jsonl")
    req = case["request"]
    service = ApprovalService(
        gateway_id=req["audience"], settings=SETTINGS, store=store, audit=audit, keyring=approver_keyring(SETTINGS),
        grant_keys=GrantKeys([SigningKey("g-1", Ed25519PrivateKey.generate())], owner=req["audience"]),
        clock=lambda: float(case["now"]),
    )
    await store.create_approval(_record(case))
    for token, want in zip(case["tokens"], case["results"]):
        approver = tokens.unverified_claims(token)["iss"]
        try:
            await service.submit(Identity("acme", approver, approver, frozenset({"approver"})), req["approval_id"], token)
            got = "ok"
        except Refusal as exc:
            got = str(exc.code)
        assert got == want
    rec = await store.get_approval(req["approval_id"])
    assert rec is not None and rec.status == case["status"]
    assert bool(rec.grant) == (case["status"] == "approved")
    await store.close()
    audit.close()


def _record(case: dict[str, Any]) -> ApprovalRecord:
    req = case["request"]
    args = parse_strict(case["presented"].encode(), max_bytes=1 << 20)
    return ApprovalRecord(
        approval_id=req["approval_id"], status=ApprovalStatus.PENDING, tenant=req["tenant"], agent="demo-agent",
        user="dana", run_id=req["run_id"], step=1, tool=req["tool"], tool_version="1",
        args_json=json.dumps(args), args_hash=args_hash(args), reasons=("test",), groups_any=tuple(req["groups_any"]),
        quorum=req["quorum"], risk={"side_effect": "write"}, created_at=case["now"] - 10,
        expires_at=case["now"] + 900, decision_id="d-1", audience=req["audience"],
    )
