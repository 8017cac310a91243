"""A vote or a grant made with an approver's key that has since been removed from the keyring
(a compromised key replaced, the approver keeping a new one) no longer counts: quorum is counted
from votes whose key the approver still holds, and a grant names the keys that approved it.
Over a real gRPC server on 127.0.0.1 (port 0), the gateway restarted on the changed keyring."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from approval_helpers import AGENT, APPROVER, approval_token, serving, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.approvals.keyring import SigningKey

EVIDENCE = json.dumps({"ticket_id": "T-1"}).encode()


def _refund(amount: int) -> str:
    return json.dumps({"order_id": "ORD-1", "amount": amount, "currency": "EUR"})


def _give_bob(config: Path, kid: str, key: Ed25519PrivateKey) -> None:
    """Bob's keys replaced by this one alone, as an operator removing a compromised key does."""
    raw = yaml.safe_load(config.read_text())
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    for approver in raw["approvals"]["approvers"]:
        if approver["id"] == "bob":
            approver["keys"] = [{"kid": kid, "public_key": base64.b64encode(public).decode()}]
    config.write_text(yaml.safe_dump(raw))


async def _submit(c, token: str, a: pb.Approval, who: str) -> pb.Approval:
    return await c.approvals.Submit(pb.SubmitApprovalRequest(approval_id=a.approval_id, token=token),
                                    metadata=c.md(APPROVER[who]), timeout=10)


def _signed_by(a: pb.Approval, kid: str, key: Ed25519PrivateKey) -> str:
    now = int(time.time())
    claims = {"iss": "bob", "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": a.args_hash,
              "tenant": a.tenant, "run_id": a.run_id, "iat": now, "exp": now + 300, "jti": str(uuid.uuid4())}
    return tokens.sign(claims, SigningKey(kid, key), tokens.TYP_APPROVAL)


async def _bob_voted_on_a_two_approver_refund(config: Path) -> pb.Approval:
    async with serving(config) as (_, c):
        asked = await c.call("refund", _refund(5000), evidence_json=EVIDENCE)
        assert asked.code == "approval_required" and asked.approval_required.quorum == 2, asked
        a = await c.get(asked.approval_required.approval_id, APPROVER["bob"])
        assert (await _submit(c, approval_token(a, "bob"), a, "bob")).status == "pending"
        return a


async def test_a_vote_made_with_a_removed_key_no_longer_counts_toward_quorum(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    a = await _bob_voted_on_a_two_approver_refund(config)
    new_key = Ed25519PrivateKey.generate()
    _give_bob(config, "bob-demo-2", new_key)
    async with serving(config) as (_, c):
        after_carol = await _submit(c, approval_token(a, "carol"), a, "carol")
        assert (after_carol.status, list(after_carol.approvers)) == ("pending", ["carol"])  # bob's old vote: gone
        again = await _submit(c, _signed_by(a, "bob-demo-2", new_key), a, "bob")  # bob, with the key he holds now
        assert again.status == "approved" and sorted(again.approvers) == ["bob", "carol"]
        grant = (await c.get(a.approval_id, AGENT)).grant
        done = await c.call("refund", _refund(5000), evidence_json=EVIDENCE, approval_grant=grant)
        assert done.code == "ok", done


async def test_a_kid_given_to_another_key_does_not_carry_the_old_keys_vote(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    a = await _bob_voted_on_a_two_approver_refund(config)
    _give_bob(config, "bob-demo-1", Ed25519PrivateKey.generate())  # the same name, another key
    async with serving(config) as (_, c):
        assert (await _submit(c, approval_token(a, "carol"), a, "carol")).status == "pending"


async def test_a_grant_whose_approving_key_was_removed_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with serving(config) as (_, c):
        asked = await c.call("refund", _refund(500))
        assert asked.code == "approval_required" and asked.approval_required.quorum == 1, asked
        a = await c.get(asked.approval_required.approval_id, APPROVER["bob"])
        assert (await _submit(c, approval_token(a, "bob"), a, "bob")).status == "approved"
        grant = (await c.get(a.approval_id, AGENT)).grant
    _give_bob(config, "bob-demo-2", Ed25519PrivateKey.generate())
    async with serving(config) as (running, c):
        refused = await c.call("refund", _refund(500), approval_grant=grant)
        assert refused.code == "invalid_approval", refused
        failed = [json.loads(line) for line in Path(running.app.config.audit_path).read_text().splitlines()
                  if '"verification_failed"' in line]
        assert failed and "no longer in the keyring" in failed[-1]["reason"]
