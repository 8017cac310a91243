"""A whole approval record is stored, created and changed, as the same text as ever: SQLite's
compact UTF-8 JSON of every field, PostgreSQL's ``Json`` of the stored object with the changes
made. Escaping what is not UTF-8 on write, and merging changes into the stored object, must
not change a byte of a valid record."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import psycopg
import pytest

from gateway.store.base import ApprovalRecord, ApprovalStatus, record_fields

S = ApprovalStatus
T0 = 1_800_000_000.123456789

RECORDS = {
    "ascii": {},
    "non-ascii": {"reasons": ("écrire dans ☃ needs ops 🚀",), "user": "dañа",
                  "risk": {"note": "naïve", "n": [1, 2.5]}},
    "nul-and-escapes": {"args_json": '{"path":"a\\u0000b\\n"}', "reasons": ("a\x00b\t\"q\"",)},
    "numbers": {"step": 2**31 - 1, "quorum": 3, "expires_at": 1e300, "risk": {"big": 10**30, "neg": -0.0}},
}


def record(**kw: Any) -> ApprovalRecord:
    fields: dict[str, Any] = dict(
        approval_id="a-1", status=S.PENDING, tenant="acme", agent="demo-agent", user="dana", run_id="run-1",
        step=3, tool="write_file", tool_version="1", args_json='{"path":"a.txt"}', args_hash="sha256:abc",
        reasons=("writes need ops approval",), groups_any=("ops", "sre"), quorum=1, risk={"side_effect": "write"},
        created_at=T0, expires_at=T0 + 900, decision_id="d-1", audience="toolgate-demo", updated_at=T0,
    )
    return ApprovalRecord(**{**fields, **kw})


def stored_text(make_store: Any, store: Any) -> str:
    if make_store.kind == "sqlite":
        return store.db.execute("SELECT record FROM approvals WHERE approval_id='a-1'").fetchone()[0]
    with psycopg.connect(make_store.dsn) as conn:
        return conn.execute("SELECT record::text FROM approvals WHERE approval_id = 'a-1'").fetchone()[0]


def as_ever(kind: str, rec: ApprovalRecord, changes: dict[str, Any]) -> str:
    """The text the stores wrote for ``rec`` after ``changes`` before they merged into the stored object."""
    if kind == "sqlite":
        new = dataclasses.replace(rec, **{k: tuple(v) if k == "approvers" else v for k, v in changes.items()})
        return json.dumps(record_fields(new), separators=(",", ":"), ensure_ascii=False)
    return json.dumps({**record_fields(rec), "status": str(rec.status), **changes})


@pytest.mark.parametrize("kw", RECORDS.values(), ids=RECORDS.keys())
async def test_a_whole_record_is_stored_as_ever_when_created_and_changed(make_store, kw: dict[str, Any]) -> None:
    store = make_store()
    rec = record(**kw)
    await store.create_approval(rec)
    assert stored_text(make_store, store) == as_ever(make_store.kind, rec, {})
    steps = [
        (S.PENDING, S.PENDING, {"approvers": ["alice"]}),
        (S.PENDING, S.APPROVED, {"approvers": ["alice", "bob"], "grant": "g.r.ant", "grant_jti": "j-1"}),
        (S.APPROVED, S.EXECUTED, {}),
    ]
    for n, (before, after, given) in enumerate(steps, 1):
        now = T0 + n / 3
        changed = await store.transition_approval("a-1", from_status=before, to_status=after, now=now, **{
            k: tuple(v) if k == "approvers" else v for k, v in given.items()})
        expected = as_ever(make_store.kind, rec, {"status": after, "updated_at": now, **given})
        assert stored_text(make_store, store) == expected
        rec = dataclasses.replace(rec, status=after, updated_at=now,
                                  **{k: tuple(v) if k == "approvers" else v for k, v in given.items()})
        assert changed == rec == await store.get_approval("a-1")
