"""Approval records for the store tests, and the text a store holds for one in its database."""

from __future__ import annotations

from typing import Any

import psycopg

from gateway.store.base import ApprovalRecord, ApprovalStatus

T0 = 1_800_000_000.0


def record(approval_id: str = "a-1", *, created_at: float = T0, **kw: Any) -> ApprovalRecord:
    """A pending request to write a file, made at ``created_at``; ``kw`` sets any other field."""
    fields: dict[str, Any] = dict(
        approval_id=approval_id, status=ApprovalStatus.PENDING, tenant="acme", agent="demo-agent", user="dana",
        run_id="run-1", step=3, tool="write_file", tool_version="1", args_json='{"path":"a.txt"}',
        args_hash="sha256:abc", reasons=("writes need ops approval",), groups_any=("ops",), quorum=1,
        risk={"side_effect": "write"}, created_at=created_at, expires_at=created_at + 900, decision_id="d-1",
        audience="toolgate-demo", updated_at=created_at,
    )
    return ApprovalRecord(**{**fields, **kw})


async def listed(store: Any, *, tenant: str = "acme", status: str = "", limit: int = 500) -> list[ApprovalRecord]:
    """The tenant's requests, newest first: the first page of ``Store.approvals_page``."""
    return [rec for rec, _ in await store.approvals_page(tenant=tenant, status=status, limit=limit)]


def stored_text(make_store: Any, store: Any, approval_id: str = "a-1") -> str:
    """The record column of ``approval_id``'s row, read as text as any other reader of the database reads it."""
    if make_store.kind == "sqlite":
        return store.db.execute("SELECT record FROM approvals WHERE approval_id=?", (approval_id,)).fetchone()[0]
    with psycopg.connect(make_store.dsn) as conn:
        return conn.execute("SELECT record::text FROM approvals WHERE approval_id = %s", (approval_id,)).fetchone()[0]
