"""Human approval bound to the exact arguments: pending requests, signed approvals, grants.

Flow: policy says ``require_approval`` → ``ApprovalGate.request`` stores a pending request →
approvers sign approvals with ``toolgate approvals approve`` (Ed25519 compact JWS) → at the
policy's quorum of distinct approvers from the required groups the gateway signs a
single-use grant → the agent retries with the grant (or the approval id) → the gate verifies
it and the pipeline claims its jti (a replay gets the stored outcome, marked replayed).

Weaknesses found in the DESIGN token contract, and what this package does about them:

- Approval and grant shared one claim shape, alg and ``aud``, so one could pass for the other
  (and a captured approval could be replayed as a rejection). Each kind now has its own
  ``typ`` header (``toolgate-approval+jwt`` / ``-rejection+jwt`` / ``-grant+jwt``) checked
  before the signature, and its own key ring: grants verify only with gateway keys, approvals
  and rejections only with approver keys.
- ``iss`` was not tied to the signing key: alice's key could sign ``iss: bob`` and count as
  bob towards a quorum. The kid names its owner, and ``iss`` must be that owner; the
  submitting API identity must be that approver too (key + API key, two factors).
- A grant was not bound to the requesting agent: a grant leaked to another agent of the same
  tenant would run. Grants carry ``agent``, checked against the caller's identity.
- Unbounded approver token lifetime (``exp`` far in the future) and no ``nbf`` rule: the
  lifetime ``exp - iat`` is capped, ``iat``/``nbf`` may not be in the future beyond the skew.
- Grant approvers are re-checked against the current keyring when the grant is used, so
  removing an approver (or a group) revokes approvals not yet executed.
"""

from __future__ import annotations

from typing import Any

from gateway.approvals.config import ApprovalsConfig, approvals_config
from gateway.approvals.gate import ApprovalGate, VerifiedApproval
from gateway.approvals.keyring import approver_keyring, gateway_grant_keys
from gateway.approvals.service import ApprovalService
from gateway.approvals.tokens import TokenRejected

__all__ = [
    "ApprovalGate",
    "ApprovalService",
    "ApprovalsConfig",
    "TokenRejected",
    "VerifiedApproval",
    "build_gate",
]


def build_gate(config: Any, *, store: Any, audit: Any) -> ApprovalGate:
    """The approval gate for a gateway config (validates ``config.approvals``)."""
    settings = approvals_config(config)
    service = ApprovalService(
        gateway_id=config.gateway_id, settings=settings, store=store, audit=audit,
        keyring=approver_keyring(settings), grant_keys=gateway_grant_keys(config),
    )
    return ApprovalGate(service)
