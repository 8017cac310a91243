"""Seams the pipeline calls for approvals and credentials, with the A-level defaults.

The approval gate (``gateway.approvals.gate``) verifies grants presented with a call and
turns a ``require_approval`` decision into a pending request. The credential resolver
(``gateway.credentials``) resolves scoped secrets; ``NoCredentials`` is its fail-closed
stand-in when no secret providers are configured.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.codes import Code
from gateway.models import CallContext, CallResult, Outcome, Refused


class ApprovalGate(Protocol):
    async def verify_presented(self, ctx: CallContext) -> Refused | CallResult | None:
        """If the call presents a grant (or approval id), verify it and set ``ctx.approval``; or
        the call's answer: a refusal, or the outcome a late grant's claim holds (replayed)."""
        ...

    async def request(self, ctx: CallContext) -> Outcome:
        """Policy requires approval and none is verified: record a pending request."""
        ...

    async def executed(self, ctx: CallContext, result: Any) -> None:
        """The approved call ran: mark the approval executed."""
        ...


class CredentialResolver(Protocol):
    async def resolve(self, ctx: CallContext) -> Refused | None:
        """Resolve the tool's credentials into ``ctx.credentials`` or refuse."""
        ...


class NoCredentials:
    async def resolve(self, ctx: CallContext) -> Refused | None:
        if ctx.tool.config.credentials:
            return Refused(Code.CREDENTIAL_UNAVAILABLE, ("no secret providers are configured",))
        return None
