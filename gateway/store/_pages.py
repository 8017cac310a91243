"""Pages of a tenant's approval requests, newest first, and the cursor that says where the next
page starts (``Store.approvals_page``).

A cursor is the sort key of the last row a page held, ``(created_at, approval_id)``, exactly as
the store holds them, so a page after it starts at the very next row: a request made or
changed between two pages neither moves what follows it (no offset) nor is skipped. Rows are
never deleted, so nothing falls out from under a cursor.

SQLite can hold a ``created_at`` that is no number (a damaged file: text or bytes in the REAL
column); its cursor keeps the value's type and bytes so such a row sorts, and pages, where
SQLite puts it. PostgreSQL's columns are typed, so its cursor is the number and the text.

A cursor comes back from a client as a page token: a cursor that does not parse is
``BadCursor``. A well-formed one names only a place in the order; the query is always the
caller's own tenant's, so a made-up cursor shows nothing the caller could not list anyway.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from gateway.store.base import ApprovalRecord

Listed = tuple[ApprovalRecord, str]
"""A record and the cursor just past it."""

SQLITE_SORT_KEY = ("typeof(created_at), CASE WHEN typeof(created_at) IN ('integer', 'real', 'null') THEN created_at "
                   "ELSE CAST(created_at AS BLOB) END, rowid")
"""The columns ``sqlite_cursor`` takes."""
SQLITE_ORDER = "ORDER BY created_at DESC, rowid DESC"
POSTGRES_ORDER = "ORDER BY created_at DESC, approval_id DESC"
MAX_CURSOR = 1024
"""Characters a cursor may have: none this gateway gives comes near it."""
_INT64 = 2**63
_NUMBER = ("integer", "real")
_BYTES = ("text", "blob")


def page_where(tenant: str, status: str, after: str, *, mark: str,
               parse: Callable[[str], tuple[str, tuple[Any, ...]]]) -> tuple[str, list[Any]]:
    """The WHERE clause of a page (``mark`` is the driver's placeholder; ``parse`` the store's
    ``*_after``) and its parameters."""
    where, params = [f"tenant = {mark}"], [tenant]
    if status:
        where.append(f"status = {mark}")
        params.append(str(status))
    if after:
        clause, values = parse(after)
        where.append(clause)
        params += values
    return " AND ".join(where), params


class BadCursor(ValueError):
    """A page token this gateway did not give."""


def sqlite_cursor(kind: str, created: Any, rowid: int) -> str:
    """SQLite's tie-break is the rowid: an integer every row has, where a damaged file's
    approval id may be NULL or bytes."""
    shown = created if kind in (*_NUMBER, "null") else bytes(created).hex()
    return json.dumps([kind, shown, rowid], allow_nan=False)


def sqlite_after(cursor: str) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (and its parameters) of the rows after ``cursor`` in ``SQLITE_ORDER``.
    Rows whose ``created_at`` is NULL (a file whose schema was bypassed) sort last, and only a
    cursor on one of them pages among them."""
    kind, created, rowid = _parse(cursor, 3)
    if not _int64(rowid):
        raise BadCursor("not a row")
    if kind == "null" and created is None:
        return "(created_at IS NULL AND rowid < ?)", (rowid,)
    if kind == "integer" and _int64(created) or kind == "real" and _finite(created):
        return "(created_at, rowid) < (?, ?)", (created, rowid)
    if kind in _BYTES and isinstance(created, str):
        try:
            value = bytes.fromhex(created)
        except ValueError:
            raise BadCursor("not hex") from None
        return f"(created_at, rowid) < ({'CAST(? AS TEXT)' if kind == 'text' else '?'}, ?)", (value, rowid)
    raise BadCursor("not a sort key")


def postgres_cursor(created: float, approval_id: str) -> str:
    return json.dumps([created, approval_id])  # NaN and the infinities (a typed column holds them) as JSON5 words


def postgres_after(cursor: str) -> tuple[str, tuple[Any, ...]]:
    created, approval_id = _parse(cursor, 2)
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not isinstance(approval_id, str):
        raise BadCursor("not a sort key")
    try:
        value = float(created)
        approval_id.encode()  # a lone surrogate: no text PostgreSQL takes
    except (OverflowError, UnicodeEncodeError):
        raise BadCursor("not a sort key") from None
    if "\x00" in approval_id:
        raise BadCursor("an approval id holds no NUL")
    return "(created_at, approval_id) < (%s, %s)", (value, approval_id)


def _parse(cursor: str, length: int) -> list[Any]:
    if len(cursor) > MAX_CURSOR:
        raise BadCursor("too long")
    try:
        value = json.loads(cursor)
    except (ValueError, RecursionError) as exc:  # RecursionError: thousands of nested brackets
        raise BadCursor(type(exc).__name__) from None
    if not isinstance(value, list) or len(value) != length:
        raise BadCursor("not a sort key")
    return value


def _int64(value: Any) -> bool:
    return type(value) is int and -_INT64 <= value < _INT64


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
