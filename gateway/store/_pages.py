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

SQLITE_SORT_KEY = ("typeof(created_at), "
                   "CASE WHEN typeof(created_at) IN ('integer', 'real') THEN created_at ELSE CAST(created_at AS BLOB) END")
"""The columns ``sqlite_cursor`` takes after the row's approval id (as bytes)."""
ORDER = "ORDER BY created_at DESC, approval_id DESC"
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


def sqlite_cursor(kind: str, created: Any, approval_id: bytes) -> str:
    shown = created if kind in _NUMBER else bytes(created).hex()
    return json.dumps([kind, shown, bytes(approval_id).hex()], allow_nan=False)


def sqlite_after(cursor: str) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (and its parameters) of the rows after ``cursor`` in ``ORDER``."""
    try:
        kind, created, approval_id = json.loads(cursor)
        if kind in _NUMBER and _finite(created):
            value, placeholder = created, "?"
        elif kind in _BYTES and isinstance(created, str):
            value, placeholder = bytes.fromhex(created), "CAST(? AS TEXT)" if kind == "text" else "?"
        else:
            raise BadCursor("not a sort key")
        key = bytes.fromhex(approval_id)
    except (TypeError, ValueError) as exc:
        raise BadCursor(str(exc)) from None
    return f"(created_at, approval_id) < ({placeholder}, CAST(? AS TEXT))", (value, key)


def postgres_cursor(created: float, approval_id: str) -> str:
    return json.dumps([created, approval_id])  # NaN and the infinities (a typed column holds them) as JSON5 words


def postgres_after(cursor: str) -> tuple[str, tuple[Any, ...]]:
    try:
        created, approval_id = json.loads(cursor)
    except (TypeError, ValueError) as exc:
        raise BadCursor(str(exc)) from None
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not isinstance(approval_id, str):
        raise BadCursor("not a sort key")
    if "\x00" in approval_id:
        raise BadCursor("an approval id holds no NUL")
    return "(created_at, approval_id) < (%s, %s)", (float(created), approval_id)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
