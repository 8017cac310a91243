"""Approval rows as both stores read and change them: a JSON object (the record) beside the
columns the store finds it by (``approval_id``, ``status``, ``tenant``, ``created_at``).

``load_approval`` reads any row without failing, so one damaged row never fails a whole ``List``.
A value the gateway did not write (the wrong type, text that is not UTF-8) is loaded as it is, for
``gateway.approvals.malformed`` to find; what is not there at all goes into the record's
``load_problems``, each a field and what is wrong (never the value), and the field is filled:

- the JSON is no object, or no JSON at all (``WHOLE_RECORD``): every field but the columns' empty;
- a field the record needs is missing: its column's value, else its type's empty value (a field
  with a default, missing in a record an earlier version wrote, has its default: no problem);
- ``approval_id``, ``tenant`` or ``status`` differs from its column: the column's, which the store
  finds, lists and (PostgreSQL) compares-and-sets the row by;
- a status column that is no status: ``expired`` (the store can match no status against it).

A list stored as something else (``"ops"``) is kept so, never read as a list of its characters.
Keys the gateway does not know (another version's) are skipped.

``changed_record`` is the stored object with a transition's changes, so a write keeps all it did
not change, damage included (stand-ins are never written); None when there is no object to change,
and the store then writes the status column alone.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from typing import Any, Callable

from gateway.store.base import WHOLE_RECORD, ApprovalRecord, ApprovalStatus

_EMPTY: dict[str, Callable[[], Any]] = {"str": str, "int": int, "float": float, "tuple[str, ...]": tuple,
                                        "dict[str, Any]": dict}
"""A field's type (as annotated) → its empty value, the stand-in for a field that is missing."""
_STORED = {f.name: f for f in fields(ApprovalRecord) if f.metadata.get("stored", True) and f.name != "status"}
_NEEDED = {name: _EMPTY[f.type] for name, f in _STORED.items() if f.default is MISSING}
"""The fields a record needs (no default) → their stand-in (a new type fails here, at import)."""
_LISTS = frozenset(name for name, f in _STORED.items() if f.type == "tuple[str, ...]")
_MATCHED = ("approval_id", "tenant")
"""Columns the record's own value must equal (``created_at`` only stands in for a missing one)."""
_STATUSES = {str(s): s for s in ApprovalStatus}
DIFFERS = "differs from the row's column"


def load_approval(stored: Any, *, approval_id: Any, status: Any, tenant: Any, created_at: Any) -> ApprovalRecord:
    """The record a row holds; never raises. ``stored`` is the record's JSON as text (or as bytes:
    what is not UTF-8 becomes lone surrogates, which ``malformed`` marks); the rest its columns."""
    columns = {"approval_id": _text(approval_id), "tenant": _text(tenant), "created_at": created_at}
    raw, whole = parse(stored)
    problems = [(WHOLE_RECORD, whole or NOT_FINITE)] if whole or _not_finite(raw) else []
    values = {}
    for name, f in _STORED.items():
        if name in raw:
            value = raw[name]
            values[name] = tuple(value) if name in _LISTS and type(value) is list else value
        elif name not in _NEEDED:
            values[name] = f.default
        else:
            values[name] = columns[name] if name in columns else _NEEDED[name]()
            if not whole:
                problems.append((name, "missing"))
    for name in _MATCHED:
        if name in raw and raw[name] != columns[name]:
            problems.append((name, DIFFERS))
        values[name] = columns[name]
    values["status"] = _status(raw.get("status", MISSING), _text(status), problems, whole)
    return ApprovalRecord(**values, load_problems=tuple(problems))


def load_row(stored: Any, approval_id: Any, status: Any, tenant: Any, created_at: Any) -> ApprovalRecord:
    """``load_approval`` of a row read as its record and its columns, in this order (both stores)."""
    return load_approval(stored, approval_id=approval_id, status=status, tenant=tenant, created_at=created_at)


def changed_record(stored: Any, changes: dict[str, Any]) -> dict[str, Any] | None:
    """The stored object with ``changes`` made; None when ``stored`` holds no JSON object."""
    raw, whole = parse(stored)
    return None if whole else {**raw, **changes}


def transition_changes(
    to_status: ApprovalStatus, now: float, approvers: tuple[str, ...] | None, **texts: str
) -> dict[str, Any]:
    """What ``transition_approval`` sets: the status, ``updated_at``, the ``approvers`` given and
    each of ``texts`` (grant, grant_jti, rejection_reason) that is not empty."""
    changes: dict[str, Any] = {"status": str(to_status), "updated_at": now}
    changes.update((name, value) for name, value in texts.items() if value)
    if approvers is not None:
        changes["approvers"] = list(approvers)
    return changes


NOT_FINITE = "holds a number JSON cannot write back (not finite)"
"""A record with ``1e400`` or ``NaN`` in it: PostgreSQL's json could not store its changes, so it takes
no vote and no grant (as a record that is no object), and a write changes its status column alone."""


def _not_finite(raw: dict[str, Any]) -> bool:
    try:
        json.dumps(raw, allow_nan=False)
    except ValueError:
        return True
    except (TypeError, RecursionError):  # what json.loads gave: neither can happen, but never raise
        return True
    return False


def parse(stored: Any) -> tuple[dict[str, Any], str]:
    """(the stored JSON object, "") or ({}, what is wrong with it)."""
    text = _text(stored)
    if not isinstance(text, str):
        return {}, f"not JSON text ({type(text).__name__})"
    try:
        raw = json.loads(text)
    except RecursionError:
        return {}, "not JSON (nested too deep)"
    except ValueError:
        return {}, "not JSON"
    if not isinstance(raw, dict):
        return {}, f"not a JSON object ({type(raw).__name__})"
    return raw, ""


def _text(value: Any) -> Any:
    """A column's bytes as text, what is not UTF-8 as lone surrogates; anything else as it is."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _status(stored: Any, column: Any, problems: list[tuple[str, str]], whole: str) -> ApprovalStatus:
    status = _STATUSES.get(column) if isinstance(column, str) else None
    if status is None:
        problems.append(("status", "the row's status column is no status: shown expired"))
        return ApprovalStatus.EXPIRED
    if not whole and stored is MISSING:
        problems.append(("status", "missing"))
    elif not whole and stored != status:
        problems.append(("status", DIFFERS if isinstance(stored, str) and stored in _STATUSES else "not a status"))
    return status
