"""A whole approval record is stored, created and changed, as the same text as ever: SQLite's
compact UTF-8 JSON of every field, PostgreSQL's ``Json`` of the stored object with the changes
made. Escaping what is not UTF-8 on write, and merging changes into the stored object, must
not change a byte of a valid record."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.store.base import ApprovalStatus
from tests.store._records import record, stored_text

S = ApprovalStatus
T0 = 1_800_000_000.123456789

RECORDS = {
    "ascii": {},
    "non-ascii": {"reasons": ("écrire dans ☃ needs ops 🚀",), "user": "dañа",
                  "risk": {"note": "naïve", "n": [1, 2.5]}},
    "nul-and-escapes": {"args_json": '{"path":"a\\u0000b\\n"}', "reasons": ("a\x00b\t\"q\"",)},
    "numbers": {"step": 2**31 - 1, "quorum": 3, "expires_at": 1e300, "risk": {"big": 10**30, "neg": -0.0}},
}

# The text each store wrote, pinned byte for byte (printed once from the stores): the fields from
# ``tenant`` to ``audience`` as each record sets them, between the head and tail each step sets.
FIELDS = {
    "sqlite": {
        "ascii": (
            '"tenant":"acme","agent":"demo-agent","user":"dana","run_id":"run-1","step":3,'
            r'"tool":"write_file","tool_version":"1","args_json":"{\"path\":\"a.txt\"}",'
            '"args_hash":"sha256:abc","reasons":["writes need ops approval"],"groups_any":["ops","sre"],'
            '"quorum":1,"risk":{"side_effect":"write"},"created_at":1800000000.1234567,'
            '"expires_at":1800000900.1234567,"decision_id":"d-1","audience":"toolgate-demo",'
        ),
        "non-ascii": (
            '"tenant":"acme","agent":"demo-agent","user":"da\u00f1\u0430","run_id":"run-1","step":3,'
            r'"tool":"write_file","tool_version":"1","args_json":"{\"path\":\"a.txt\"}",'
            '"args_hash":"sha256:abc","reasons":["\u00e9crire dans \u2603 needs ops \U0001f680"],'
            '"groups_any":["ops","sre"],"quorum":1,"risk":{"note":"na\u00efve","n":[1,2.5]},'
            '"created_at":1800000000.1234567,'
            '"expires_at":1800000900.1234567,"decision_id":"d-1","audience":"toolgate-demo",'
        ),
        "nul-and-escapes": (
            '"tenant":"acme","agent":"demo-agent","user":"dana","run_id":"run-1","step":3,'
            r'"tool":"write_file","tool_version":"1","args_json":"{\"path\":\"a\\u0000b\\n\"}",'
            r'"args_hash":"sha256:abc","reasons":["a\u0000b\t\"q\""],"groups_any":["ops","sre"],'
            '"quorum":1,"risk":{"side_effect":"write"},"created_at":1800000000.1234567,'
            '"expires_at":1800000900.1234567,"decision_id":"d-1","audience":"toolgate-demo",'
        ),
        "numbers": (
            '"tenant":"acme","agent":"demo-agent","user":"dana","run_id":"run-1","step":2147483647,'
            r'"tool":"write_file","tool_version":"1","args_json":"{\"path\":\"a.txt\"}",'
            '"args_hash":"sha256:abc","reasons":["writes need ops approval"],"groups_any":["ops","sre"],'
            '"quorum":3,"risk":{"big":1000000000000000000000000000000,"neg":-0.0},'
            '"created_at":1800000000.1234567,"expires_at":1e+300,"decision_id":"d-1",'
            '"audience":"toolgate-demo",'
        ),
    },
    "postgres": {
        "ascii": (
            '"tenant": "acme", "agent": "demo-agent", "user": "dana", "run_id": "run-1", "step": 3, '
            r'"tool": "write_file", "tool_version": "1", "args_json": "{\"path\":\"a.txt\"}", '
            '"args_hash": "sha256:abc", "reasons": ["writes need ops approval"], '
            '"groups_any": ["ops", "sre"], "quorum": 1, "risk": {"side_effect": "write"}, '
            '"created_at": 1800000000.1234567, "expires_at": 1800000900.1234567, "decision_id": "d-1", '
            '"audience": "toolgate-demo", '
        ),
        "non-ascii": (
            r'"tenant": "acme", "agent": "demo-agent", "user": "da\u00f1\u0430", "run_id": "run-1", '
            r'"step": 3, "tool": "write_file", "tool_version": "1", "args_json": "{\"path\":\"a.txt\"}", '
            r'"args_hash": "sha256:abc", "reasons": ["\u00e9crire dans \u2603 needs ops \ud83d\ude80"], '
            r'"groups_any": ["ops", "sre"], "quorum": 1, "risk": {"note": "na\u00efve", "n": [1, 2.5]}, '
            '"created_at": 1800000000.1234567, "expires_at": 1800000900.1234567, "decision_id": "d-1", '
            '"audience": "toolgate-demo", '
        ),
        "nul-and-escapes": (
            '"tenant": "acme", "agent": "demo-agent", "user": "dana", "run_id": "run-1", "step": 3, '
            r'"tool": "write_file", "tool_version": "1", "args_json": "{\"path\":\"a\\u0000b\\n\"}", '
            r'"args_hash": "sha256:abc", "reasons": ["a\u0000b\t\"q\""], "groups_any": ["ops", "sre"], '
            '"quorum": 1, "risk": {"side_effect": "write"}, "created_at": 1800000000.1234567, '
            '"expires_at": 1800000900.1234567, "decision_id": "d-1", "audience": "toolgate-demo", '
        ),
        "numbers": (
            '"tenant": "acme", "agent": "demo-agent", "user": "dana", "run_id": "run-1", '
            '"step": 2147483647, "tool": "write_file", "tool_version": "1", '
            r'"args_json": "{\"path\":\"a.txt\"}", "args_hash": "sha256:abc", '
            '"reasons": ["writes need ops approval"], "groups_any": ["ops", "sre"], "quorum": 3, '
            '"risk": {"big": 1000000000000000000000000000000, "neg": -0.0}, '
            '"created_at": 1800000000.1234567, "expires_at": 1e+300, "decision_id": "d-1", '
            '"audience": "toolgate-demo", '
        ),
    },
}
STEPS = {  # created, voted, approved, executed: (status and before, ``approvers`` and after)
    "sqlite": [
        ('{"approval_id":"a-1","status":"pending",',
         '"approvers":[],"rejection_reason":"","grant":"","grant_jti":"","updated_at":1800000000.1234567}'),
        ('{"approval_id":"a-1","status":"pending",',
         '"approvers":["alice"],"rejection_reason":"","grant":"","grant_jti":"","updated_at":1800000000.45679}'),
        ('{"approval_id":"a-1","status":"approved",',
         '"approvers":["alice","bob"],"rejection_reason":"","grant":"g.r.ant","grant_jti":"j-1",'
         '"updated_at":1800000000.7901235}'),
        ('{"approval_id":"a-1","status":"executed",',
         '"approvers":["alice","bob"],"rejection_reason":"","grant":"g.r.ant","grant_jti":"j-1",'
         '"updated_at":1800000001.1234567}'),
    ],
    "postgres": [
        ('{"approval_id": "a-1", "status": "pending", ',
         '"approvers": [], "rejection_reason": "", "grant": "", "grant_jti": "", "updated_at": 1800000000.1234567}'),
        ('{"approval_id": "a-1", "status": "pending", ',
         '"approvers": ["alice"], "rejection_reason": "", "grant": "", "grant_jti": "", '
         '"updated_at": 1800000000.45679}'),
        ('{"approval_id": "a-1", "status": "approved", ',
         '"approvers": ["alice", "bob"], "rejection_reason": "", "grant": "g.r.ant", "grant_jti": "j-1", '
         '"updated_at": 1800000000.7901235}'),
        ('{"approval_id": "a-1", "status": "executed", ',
         '"approvers": ["alice", "bob"], "rejection_reason": "", "grant": "g.r.ant", "grant_jti": "j-1", '
         '"updated_at": 1800000001.1234567}'),
    ],
}


def as_ever(kind: str, name: str, step: int) -> str:
    """The pinned text ``kind`` stores for record ``name`` after ``step`` (0: created)."""
    head, tail = STEPS[kind][step]
    return head + FIELDS[kind][name] + tail


@pytest.mark.parametrize("name", RECORDS)
async def test_a_whole_record_is_stored_as_ever_when_created_and_changed(make_store, name: str) -> None:
    store = make_store()
    rec = record(created_at=T0, groups_any=("ops", "sre"), **RECORDS[name])
    await store.create_approval(rec)
    assert stored_text(make_store, store) == as_ever(make_store.kind, name, 0)
    steps = [
        (S.PENDING, S.PENDING, {"approvers": ["alice"]}),
        (S.PENDING, S.APPROVED, {"approvers": ["alice", "bob"], "grant": "g.r.ant", "grant_jti": "j-1"}),
        (S.APPROVED, S.EXECUTED, {}),
    ]
    for n, (before, after, given) in enumerate(steps, 1):
        now = T0 + n / 3
        changed = await store.transition_approval("a-1", from_status=before, to_status=after, now=now, **{
            k: tuple(v) if k == "approvers" else v for k, v in given.items()})
        assert stored_text(make_store, store) == as_ever(make_store.kind, name, n)
        rec = dataclasses.replace(rec, status=after, updated_at=now,
                                  **{k: tuple(v) if k == "approvers" else v for k, v in given.items()})
        assert changed == rec == await store.get_approval("a-1")
