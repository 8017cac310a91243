"""The store protocol.

Execution claims give at-most-once execution. ``claim(scope, key, args_hash)`` atomically
inserts a claim in state ``running`` or returns the existing one; the winner executes and
calls ``complete`` with the serialized outcome; everybody else waits for that outcome. The
scope separates idempotency keys (``idem:<tenant>:<tool>``) from consumed grant ids
(``grant``). A claim whose holder died stays ``running``: its outcome is unknown, so it is
never re-executed. Once it is older than the longest its tool can run, a caller asking for it
``abandon``s it: it becomes ``done`` with an ``outcome_unknown`` refusal as its outcome, the
answer every later call with that key gets (see ``gateway.claims``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol, Sequence

from gateway.config import Config

RECENT_SECONDS = 5.0
"""How far back a reader of ``changed_approvals`` looks again: far more than any write takes
from its stamp to its commit."""


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"  # the caller now holds it and must execute + complete
    RUNNING = "running"  # somebody else holds it; outcome not yet known
    DONE = "done"  # finished; outcome_json holds the stored outcome


@dataclass(frozen=True, slots=True)
class Claim:
    status: ClaimStatus
    args_hash: str
    outcome_json: str | None = None
    created: float | None = None  # when it was claimed (read back for a running claim)


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """A token bucket: ``capacity`` tokens, refilled at ``per_second``; starts full."""

    key: str
    capacity: float
    per_second: float


class StoreUnavailable(Exception):
    """The store cannot be reached or failed; calls fail closed with internal_error."""


# -- approvals (issue B) --------------------------------------------------------------------


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"  # quorum reached; ``grant`` holds the gateway-signed grant
    REJECTED = "rejected"
    EXPIRED = "expired"
    EXECUTED = "executed"  # the grant was consumed by an execution


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approval request. Times are epoch seconds; ``args_json`` is RFC 8785 canonical."""

    approval_id: str
    status: ApprovalStatus
    tenant: str
    agent: str
    user: str
    run_id: str
    step: int
    tool: str
    tool_version: str
    args_json: str
    args_hash: str
    reasons: tuple[str, ...]
    groups_any: tuple[str, ...]
    quorum: int
    risk: dict[str, Any]
    created_at: float
    expires_at: float
    decision_id: str
    audience: str
    approvers: tuple[str, ...] = ()
    rejection_reason: str = ""
    grant: str = ""
    grant_jti: str = ""
    updated_at: float = 0.0
    load_problems: tuple[tuple[str, str], ...] = field(default=(), metadata={"stored": False})
    """Not stored: what the store found missing or at odds with the row's columns when it read the
    row, as (field, problem) pairs (``WHOLE_RECORD`` when its JSON is no object); the field holds
    its column's value or an empty stand-in (``gateway.store._records``). A record with any is
    malformed (``gateway.approvals.malformed``) and never written whole."""


WHOLE_RECORD = "record"
"""The field a load problem names when the stored JSON is no object at all."""
_RECORD_FIELDS = tuple(f.name for f in fields(ApprovalRecord) if f.metadata.get("stored", True))


def record_fields(record: ApprovalRecord) -> dict[str, Any]:
    """The record's fields by name, as stored (JSON). Shallow, unlike ``dataclasses.asdict``
    (a recursive copy, ~4x slower): every field is a plain value, a tuple of strings or the
    ``risk`` mapping, so the JSON of the two is the same. Raises ``ValueError`` for a record read
    with load problems: its stand-ins, written, would read back as a whole record."""
    if record.load_problems:
        raise ValueError("a record read with load problems is never written whole")
    return {name: getattr(record, name) for name in _RECORD_FIELDS}


class VoteStatus(StrEnum):
    ADDED = "added"  # recorded; ``approvers`` now includes the approver
    SAME_APPROVER = "same_approver"  # this approver already approved: not counted twice
    JTI_REUSED = "jti_reused"  # the token's jti was seen before (a replayed approval)
    NOT_PENDING = "not_pending"  # the request is no longer pending
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class Vote:
    status: VoteStatus
    keys: tuple[tuple[str, str], ...] = ()
    """(approver, the key the vote was signed with, ``Keyring.ref_of``) of each vote in order: a
    vote counts only while the approver still holds that key (``ApprovalService.submit``)."""

    @property
    def approvers(self) -> tuple[str, ...]:
        """Every approver who voted on the request, in the order of their first vote."""
        return tuple(dict.fromkeys(approver for approver, _ in self.keys))


class ApprovalStore(Protocol):
    """What the approval flow needs from the store. Each method is atomic."""

    async def create_approval(self, record: ApprovalRecord) -> None: ...

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...

    async def approvals_page(
        self, *, tenant: str, status: str = "", limit: int = 100, after: str = ""
    ) -> list[tuple[ApprovalRecord, str]]:
        """One page of the tenant's requests ("" status: any), newest first, at most ``limit``,
        each with the cursor just past it; ``after`` a cursor: the page that follows it (more may
        follow only a full page). A cursor that does not parse raises ``_pages.BadCursor``."""
        ...

    async def count_pending_approvals(self, *, after: float, until: float) -> int:
        """How many pending requests, of every tenant, have an expiry that is a number past
        ``after`` and at most ``until``: counted in the store, no record read out of it."""
        ...

    async def pending_approvals(self, *, tenant: str, request_key: str, limit: int = 5) -> list[ApprovalRecord]:
        """The tenant's pending requests whose ``request_key`` (stored with the record when it was
        created) is this one, newest first: found by index, whatever else the tenant has pending."""
        ...

    async def changed_approvals(
        self, *, tenant: str, since: float | None, limit: int = 500
    ) -> tuple[list[ApprovalRecord], float]:
        """The tenant's requests created or changed at or after ``since`` (None: in the last
        ``RECENT_SECONDS``), oldest change first, at most ``limit``; and where to ask from next:
        the last one's stamp when there were ``limit`` (more may follow), else the store's
        clock now less ``RECENT_SECONDS``.

        Every write stamps the row with the store's clock: the database server's for
        PostgreSQL (one clock for all replicas), the host's for SQLite (all its workers share
        the host). A write commits right after its stamp, so a reader that asks again from
        there misses nothing; it re-reads what it saw and must tell repeats apart itself
        (``gateway.approvals.follow`` compares states).
        """
        ...

    async def add_approval_vote(self, approval_id: str, approver: str, jti: str, now: float, key: str = "") -> Vote:
        """Consume ``jti`` and count ``approver`` once, only while the request is pending."""
        ...

    async def transition_approval(
        self, approval_id: str, *, from_status: ApprovalStatus, to_status: ApprovalStatus, now: float,
        approvers: tuple[str, ...] | None = None, grant: str = "", grant_jti: str = "", rejection_reason: str = "",
    ) -> ApprovalRecord | None:
        """Compare-and-set the status (and set the given fields); None if it was not ``from_status``."""
        ...


class Store(ApprovalStore, Protocol):
    async def claim(self, scope: str, key: str, args_hash: str, now: float) -> Claim:
        """Atomically claim (scope, key) or return the existing claim."""
        ...

    async def get_claim(self, scope: str, key: str) -> Claim | None: ...

    async def complete(self, scope: str, key: str, outcome_json: str, now: float) -> None:
        """Store the outcome of a claim held by the caller."""
        ...

    async def release(self, scope: str, key: str) -> None:
        """Drop a claim held by the caller that never executed (so a retry may run)."""
        ...

    async def abandon(self, scope: str, key: str, claimed_before: float, outcome_json: str, now: float) -> bool:
        """Finish a claim that is still ``running`` and was claimed before ``claimed_before``
        with ``outcome_json``, atomically; False when it is not (any more) such a claim."""
        ...

    async def prune_claims(self, finished_before: float) -> int:
        """Delete finished claims whose outcome is older than ``finished_before``; running
        claims stay. Returns how many were deleted."""
        ...

    async def take_tokens(self, buckets: Sequence[BucketSpec], now: float) -> float:
        """Atomically take one token from every bucket or from none.

        Returns 0.0 when taken, else the seconds until every bucket holds a token again.
        """
        ...

    async def close(self) -> None: ...


def open_store(config: Config, **kwargs: Any) -> Store:
    """The store the config names."""
    if config.store.kind == "postgres":
        from gateway.store.postgres import PostgresStore

        return PostgresStore(config.store.dsn, **kwargs)
    from gateway.store.sqlite import SQLiteStore

    return SQLiteStore(config.store_path, **kwargs)


def request_key(*, agent: str, user: str, run_id: str, tool: str, args_hash: str, groups_any: Sequence[str],
                quorum: int) -> str:
    """What makes a request the same request (an agent asking again for one call, to be approved by
    the same groups and quorum): the digest the stores keep beside the record and index by tenant."""
    text = json.dumps([agent, user, run_id, tool, args_hash, list(groups_any), quorum], default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record_request_key(record: ApprovalRecord) -> str:
    """``request_key`` of a record."""
    return request_key(agent=record.agent, user=record.user, run_id=record.run_id, tool=record.tool,
                       args_hash=record.args_hash, groups_any=record.groups_any, quorum=record.quorum)
