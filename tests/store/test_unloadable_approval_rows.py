"""An approval row whose record the store cannot load whole (its JSON no object, no JSON at all,
a field it needs missing, a list stored as text, at odds with the row's columns) is loaded, marked
(``load_problems``, read by ``gateway.approvals.malformed``) and filled from the row's columns,
instead of failing ``approvals_page`` for the whole tenant, or ``get_approval`` for that one.
Each row is damaged in the real database file or server, as a damaged store or another version
would leave it; every test runs on SQLite and on PostgreSQL (``make_store``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import psycopg
import pytest

from gateway.approvals.malformed import (MALFORMED_REASON, past_expiry, record_problem, salvaged, vote_problem,
                                         writable)
from gateway.store.base import ApprovalRecord, ApprovalStatus, record_fields
from tests.store._records import T0, listed, record, stored_text

S = ApprovalStatus
DIFFERS = "differs from the row's column"
NOW = T0 + 10


def stored_json(rec: ApprovalRecord, **changes: Any) -> str:
    """``rec`` as the store writes it, with ``changes`` (None: the key left out)."""
    raw = {**record_fields(rec), "status": str(rec.status), **changes}
    return json.dumps({k: v for k, v in raw.items() if v is not None})


def set_row(make_store: Any, store: Any, approval_id: str, record_text: str | bytes, **columns: str) -> None:
    """Write ``record_text`` (bytes: as they are, not UTF-8 perhaps; SQLite only) and ``columns``
    into the row, as the database holds them."""
    sets = {"record": record_text, **columns}
    if make_store.kind == "sqlite":
        assign = ", ".join(f"{c}=CAST(? AS TEXT)" for c in sets)
        store.db.execute(f"UPDATE approvals SET {assign} WHERE approval_id=?", (*sets.values(), approval_id))
        return
    assign = ", ".join(f"{c} = %s::json" if c == "record" else f"{c} = %s" for c in sets)
    with psycopg.connect(make_store.dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE approvals SET {assign} WHERE approval_id = %s", (*sets.values(), approval_id))


async def damaged(make_store: Any, record_text: str | bytes, **columns: str) -> tuple[Any, ApprovalRecord]:
    """A store holding a whole request ``a-0`` and ``a-1`` (made a second later) with ``record_text``."""
    store = make_store()
    whole = record("a-0")
    await store.create_approval(whole)
    await store.create_approval(record("a-1", created_at=T0 + 1))
    set_row(make_store, store, "a-1", record_text, **columns)
    return store, whole


async def read_every_way(store: Any, whole: ApprovalRecord) -> ApprovalRecord:
    """The damaged ``a-1`` as get, list (by tenant, by status, all) and changed_approvals read it: the
    same each way, and listed beside the whole ``a-0``, which reads back as it was."""
    got = await store.get_approval("a-1")
    assert got is not None
    assert await listed(store) == [got, whole]
    assert got in await listed(store, status=S.PENDING)
    changed, _ = await store.changed_approvals(tenant="acme", since=0.0)
    assert sorted(changed, key=lambda r: r.approval_id) == [whole, got]
    return got


# -- a row whose record is no JSON object: loaded from its columns, marked, never votable ----------------------

NO_OBJECT = {
    "array": ("[1, 2]", "not a JSON object (list)"),
    "string": ('"pending"', "not a JSON object (str)"),
    "null": ("null", "not a JSON object (NoneType)"),
    "number": ("7", "not a JSON object (int)"),
    "nested-too-deep": ("[" * 5000 + "]" * 5000, "not JSON (nested too deep)"),
}
NOT_JSON_SQLITE = {  # PostgreSQL's json column refuses these; an SQLite file may hold them
    "not-json": ("{not json", "not JSON"),
    "truncated": ('{"approval_id": "a-1", "status": "pen', "not JSON"),
    "bytes-not-utf8": (b'{"approval_id": "a-1", \xff\xfe}', "not JSON"),
}


async def _assert_loaded_from_columns(store: Any, whole: ApprovalRecord, problem: str) -> None:
    got = await read_every_way(store, whole)
    assert (got.approval_id, got.tenant, got.status, got.created_at) == ("a-1", "acme", S.PENDING, T0 + 1)
    assert (got.tool, got.args_hash, got.groups_any, got.quorum, got.expires_at) == ("", "", (), 0, 0.0)
    assert got.load_problems == (("record", problem),)
    assert record_problem(got) == vote_problem(got) == f"record: {problem}"  # never approved, nor voted on
    assert salvaged(got).reasons == (MALFORMED_REASON + f"record: {problem}",)
    assert past_expiry(got, NOW)  # no expiry to be read: it ends


@pytest.mark.parametrize("text,problem", NO_OBJECT.values(), ids=NO_OBJECT.keys())
async def test_a_row_whose_record_is_no_json_object_is_listed_marked_from_its_columns(
        make_store, text: str, problem: str) -> None:
    store, whole = await damaged(make_store, text)
    await _assert_loaded_from_columns(store, whole, problem)


@pytest.mark.parametrize("text,problem", NOT_JSON_SQLITE.values(), ids=NOT_JSON_SQLITE.keys())
async def test_a_row_whose_record_is_no_json_is_listed_marked_from_its_columns(
        make_store, text: str | bytes, problem: str) -> None:
    if make_store.kind != "sqlite":
        pytest.skip("PostgreSQL's json column holds only JSON")
    store, whole = await damaged(make_store, text)
    await _assert_loaded_from_columns(store, whole, problem)


async def test_a_row_with_no_record_expires_in_its_status_column_leaving_the_record_as_it_was(make_store) -> None:
    store, whole = await damaged(make_store, "[1, 2]")
    expired = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.EXPIRED, now=NOW)
    assert expired is not None and expired.status is S.EXPIRED
    assert expired.load_problems == (("record", "not a JSON object (list)"),)
    assert await store.get_approval("a-1") == expired
    assert await listed(store, status=S.EXPIRED) == [expired]
    assert json.loads(stored_text(make_store, store, "a-1")) == [1, 2]  # the evidence kept
    assert await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.REJECTED, now=NOW) is None


# -- a record missing a field it needs: the column's value, else blank; marked missing ------------------------

MISSING = {
    # the field left out, what it reads as
    "groups_any": ((), "groups_any: missing"),  # a vote binds to it
    "args_hash": ("", "args_hash: missing"),
    "step": (0, "step: missing"),
    "expires_at": (0.0, "expires_at: missing"),
    "approval_id": ("a-1", "approval_id: missing"),  # the column's
    "tenant": ("acme", "tenant: missing"),
    "created_at": (T0 + 1, "created_at: missing"),
    "status": (S.PENDING, "status: missing"),
}


@pytest.mark.parametrize("field,value,problem", [(f, *v) for f, v in MISSING.items()], ids=MISSING.keys())
async def test_a_record_missing_a_field_it_needs_is_listed_marked(
        make_store, field: str, value: Any, problem: str) -> None:
    store, whole = await damaged(make_store, stored_json(record("a-1", created_at=T0 + 1), **{field: None}))
    got = await read_every_way(store, whole)
    assert getattr(got, field) == value
    assert record_problem(got) == problem
    assert got == dataclasses.replace(record("a-1", created_at=T0 + 1), **{field: value},
                                      load_problems=((field, "missing"),))


async def test_a_record_wrapped_in_another_object_is_marked_and_no_vote_counts_on_it(make_store) -> None:
    inner = json.loads(stored_json(record("a-1", created_at=T0 + 1)))
    store, whole = await damaged(make_store, json.dumps({"record": inner}))
    got = await read_every_way(store, whole)
    assert (got.approval_id, got.tenant, got.created_at, got.tool) == ("a-1", "acme", T0 + 1, "")
    assert record_problem(got) == vote_problem(got) == "approval_id: missing"


async def test_fields_an_earlier_version_did_not_write_read_as_their_defaults(make_store) -> None:
    """Not damage: ``approvers``, ``grant``, ``updated_at``... have defaults (and unknown keys are skipped)."""
    rec = record("a-1", created_at=T0 + 1, updated_at=0.0)
    text = stored_json(rec, approvers=None, rejection_reason=None, grant=None, grant_jti=None, updated_at=None,
                       some_later_field=[1])
    store, whole = await damaged(make_store, text)
    got = await read_every_way(store, whole)
    assert got == rec and record_problem(got) == ""


# -- a list stored as something else: damage, never a list of its characters ------------------------------------

LISTS = {
    "groups-as-text": ("groups_any", "ops", "groups_any: not a list (str)"),
    "reasons-as-text": ("reasons", "writes", "reasons: not a list (str)"),
    "approvers-as-text": ("approvers", "alice", "approvers: not a list (str)"),
    "groups-null": ("groups_any", None, "groups_any: not a list (NoneType)"),
    "reasons-an-object": ("reasons", {"a": "b"}, "reasons: not a list (dict)"),
    "approvers-empty-text": ("approvers", "", "approvers: not a list (str)"),
}


@pytest.mark.parametrize("field,value,problem", LISTS.values(), ids=LISTS.keys())
async def test_a_list_stored_as_something_else_is_marked_not_read_as_a_list(
        make_store, field: str, value: Any, problem: str) -> None:
    rec = record("a-1", created_at=T0 + 1)
    raw = {**json.loads(stored_json(rec)), field: value}
    store, whole = await damaged(make_store, json.dumps(raw))
    got = await read_every_way(store, whole)
    assert getattr(got, field) == value  # as stored: "ops", never ("o", "p", "s")
    assert record_problem(got) == problem
    assert MALFORMED_REASON + problem in salvaged(got).reasons


async def test_an_approver_group_stored_as_text_counts_for_no_vote(make_store) -> None:
    raw = {**json.loads(stored_json(record("a-1", created_at=T0 + 1))), "groups_any": "ops"}
    store, _ = await damaged(make_store, json.dumps(raw))
    assert vote_problem(await store.get_approval("a-1")) == "groups_any: not a list (str)"


# -- a record at odds with the row's columns: the columns', which the store finds the row by; marked ------------

ODDS = {
    "tenant": ({"tenant": "other"}, {}, "tenant", "acme", f"tenant: {DIFFERS}"),
    "approval-id": ({"approval_id": "a-9"}, {}, "approval_id", "a-1", f"approval_id: {DIFFERS}"),
    "status": ({"status": "approved"}, {}, "status", S.PENDING, f"status: {DIFFERS}"),
    "status-no-status": ({"status": "done"}, {}, "status", S.PENDING, "status: not a status"),
    "status-column-no-status": ({}, {"status": "done"}, "status", S.EXPIRED,
                                "status: the row's status column is no status: shown expired"),
}


@pytest.mark.parametrize("record_changes,columns,field,value,problem", ODDS.values(), ids=ODDS.keys())
async def test_a_record_at_odds_with_its_columns_reads_the_columns_marked(
        make_store, record_changes: dict[str, Any], columns: dict[str, str], field: str, value: Any,
        problem: str) -> None:
    store, whole = await damaged(make_store, stored_json(record("a-1", created_at=T0 + 1), **record_changes),
                                 **columns)
    got = await store.get_approval("a-1")
    assert getattr(got, field) == value
    assert record_problem(got) == problem
    assert got in await listed(store)
    assert whole in await listed(store)


# -- writing back a record that holds text that is not UTF-8 ----------------------------------------------------

async def test_a_record_holding_text_that_is_not_utf8_is_written_back_as_it_reads(make_store) -> None:
    """A lone surrogate (a JSON escape a damaged store holds) survives a transition, escaped: the row
    stays UTF-8 JSON any reader can read, and reads back the same, still marked."""
    rec = record("a-1", created_at=T0 + 1)
    store, _ = await damaged(make_store, stored_json(rec, reasons=["quota \udfff"]))
    got = await store.get_approval("a-1")
    assert (got.reasons, writable(got)) == (("quota \udfff",), False)
    rejected = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.REJECTED, now=NOW,
                                               rejection_reason="not today é")
    assert rejected == record("a-1", created_at=T0 + 1, reasons=("quota \udfff",), status=S.REJECTED,
                              rejection_reason="not today é", updated_at=NOW)
    assert await store.get_approval("a-1") == rejected
    assert json.loads(stored_text(make_store, store, "a-1"))["reasons"] == ["quota \udfff"]


async def test_text_that_is_not_utf8_in_an_sqlite_row_reads_as_lone_surrogates_and_writes_back(make_store) -> None:
    if make_store.kind != "sqlite":
        pytest.skip("PostgreSQL holds only UTF-8 text")
    text = stored_json(record("a-1", created_at=T0 + 1)).encode()
    store, whole = await damaged(make_store, text.replace(b'"write_file"', b'"write_\xff"'))  # a byte, not UTF-8
    got = await read_every_way(store, whole)
    assert got.tool == "write_\udcff"
    assert record_problem(got) == "tool: not UTF-8 text (a lone surrogate)"
    expired = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.EXPIRED, now=NOW)
    assert expired is not None and expired.tool == "write_\udcff"
    assert await store.get_approval("a-1") == expired
    assert '"write_\\udcff"' in stored_text(make_store, store, "a-1")  # escaped: the row is UTF-8 now


async def test_a_record_with_a_number_json_cannot_hold_again_expires_all_the_same(make_store) -> None:
    """``1e400`` reads as infinity, which JSON cannot write: the status column changes alone (PostgreSQL)."""
    text = stored_json(record("a-1", created_at=T0 + 1)).replace(f'"expires_at": {T0 + 901}', '"expires_at": 1e400')
    store, _ = await damaged(make_store, text)
    got = await store.get_approval("a-1")
    assert (record_problem(got), past_expiry(got, NOW)) == ("expires_at: out of range", True)
    expired = await store.transition_approval("a-1", from_status=S.PENDING, to_status=S.EXPIRED, now=NOW)
    assert expired is not None and expired.status is S.EXPIRED
    assert (await store.get_approval("a-1")).status is S.EXPIRED
    assert await listed(store, status=S.EXPIRED) == [await store.get_approval("a-1")]


async def test_a_record_read_with_load_problems_is_never_written_whole(make_store) -> None:
    store, _ = await damaged(make_store, "[1, 2]")
    got = await store.get_approval("a-1")
    with pytest.raises(ValueError):
        await store.create_approval(got)
