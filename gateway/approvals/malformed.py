"""Approval records that fail validation: a damaged store, or a record some other version
wrote. The store loads every row (``gateway.store._records``), but a field is not what the gateway
writes: text that is not UTF-8, a time or a count out of range, a value of the wrong type, a list
stored as text; or the store could not find it (``ApprovalRecord.load_problems``: a field missing,
at odds with its column, or the whole record no JSON object, all but its columns blank).

Such a record is still shown (``salvaged``: every bad field replaced by a stand-in, the problem
in ``Approval.damage``, and, for clients older than that field, one more reason,
``MALFORMED_REASON`` and the problem), so it neither fails a whole ``List`` nor leaves an
approver blind. It can be rejected (the vote is verified as ever), never approved; unless
``vote_problem`` says why no vote can count: a bad field the vote binds to or is audited with, a
record that is no JSON object, or text that is not UTF-8. A grant issued before the damage is
refused when a field it is checked against is bad (``grant_problem``). A problem names the field
and what is wrong with it, never the value (what cannot be shown).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Iterator

from gateway.store._records import NOT_FINITE
from gateway.store.base import WHOLE_RECORD, ApprovalRecord

MALFORMED_REASON = "toolgate: malformed record: "
"""The reason a salvaged record carries last: this, then the problem."""
NOT_UTF8 = "not UTF-8 text (a lone surrogate)"
INT32 = 2**31 - 1
MIN_TIME, MAX_TIME = -62135596800, 253402300799
"""Epoch seconds of 0001-01-01 and 9999-12-31T23:59:59Z: the times a protobuf Timestamp holds."""


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return f"not text ({type(value).__name__})"
    try:
        value.encode()
    except UnicodeEncodeError:
        return NOT_UTF8
    return ""


def _texts(value: Any) -> str:
    if not isinstance(value, (tuple, list)):
        return f"not a list ({type(value).__name__})"
    return next((f"an item is {problem}" for problem in map(_text, value) if problem), "")


def _int32(value: Any) -> str:
    if type(value) is not int:
        return f"not an integer ({type(value).__name__})"
    return "" if -INT32 - 1 <= value <= INT32 else "out of range"


def _quorum(value: Any) -> str:
    """A count of approvers: below one, any vote (or none) would make it."""
    return _int32(value) or ("less than 1" if value < 1 else "")


def _time(value: Any) -> str:
    if type(value) not in (int, float):
        return f"not a number ({type(value).__name__})"
    return "" if math.isfinite(value) and MIN_TIME <= value <= MAX_TIME else "out of range"


def _risk(value: Any) -> str:
    """An object whose text, keys and nested values too, is UTF-8 (the store writes it as JSON)."""
    if not isinstance(value, dict):
        return f"not an object ({type(value).__name__})"
    try:
        json.dumps(value, ensure_ascii=False, default=str, allow_nan=False).encode()
    except UnicodeEncodeError:
        return NOT_UTF8
    except ValueError:  # allow_nan: 1e400 reads back as infinity
        return "holds a number JSON cannot write (not finite)"
    except (TypeError, RecursionError):
        return "not a JSON object"
    return ""


_KINDS: dict[str, tuple[Callable[[Any], str], Any]] = {
    "text": (_text, ""), "texts": (_texts, ()), "int32": (_int32, 0), "quorum": (_quorum, 0), "time": (_time, 0),
    "risk": (_risk, {}),
}
"""Each kind of field: its check, and the stand-in a salvaged record has in place of a bad value."""
_FIELDS = {
    **dict.fromkeys(("approval_id", "tenant", "agent", "user", "run_id", "tool", "tool_version", "args_json",
                     "args_hash", "decision_id", "audience", "rejection_reason", "grant"), "text"),
    **dict.fromkeys(("reasons", "groups_any", "approvers"), "texts"),
    "grant_jti": "text", "step": "int32", "quorum": "quorum", "created_at": "time", "expires_at": "time", "risk": "risk",
}
"""The fields a record is shown with, by kind (and ``grant_jti``, never shown but stored)."""
VOTE_FIELDS = ("approval_id", "tenant", "agent", "user", "run_id", "tool", "args_hash", "audience", "groups_any",
               "decision_id")
"""The fields an approver's token is checked against (``ApprovalService._verify_approver_token``),
and the vote audited with: a record with one of them bad can be neither approved nor rejected."""


def _problems(rec: ApprovalRecord) -> Iterator[tuple[str, str]]:
    """The store's problems, then the fields'; a number that is not finite last, so that a field
    holding it (``expires_at: out of range``) is named first."""
    yield from (p for p in rec.load_problems if p[1] != NOT_FINITE)
    yield from _bad_values(rec)
    yield from (p for p in rec.load_problems if p[1] == NOT_FINITE)


def _bad_values(rec: ApprovalRecord) -> Iterator[tuple[str, str]]:
    for name, kind in _FIELDS.items():
        if problem := _KINDS[kind][0](getattr(rec, name)):
            yield name, problem


def record_problem(rec: ApprovalRecord) -> str:
    """What is wrong with the first bad field of ``rec``, as ``<field>: <problem>``; "" when none is."""
    return next((f"{name}: {problem}" for name, problem in _problems(rec)), "")


def vote_problem(rec: ApprovalRecord) -> str:
    """Why no vote can count on ``rec``, as ``record_problem`` says it; "" when one can."""
    return next((f"{name}: {problem}" for name, problem in _problems(rec)
                 if name in VOTE_FIELDS or name == WHOLE_RECORD or NOT_UTF8 in problem), "")


GRANT_FIELDS = ("approval_id", "tenant", "agent", "user", "status", "groups_any", "quorum", "grant_jti", "grant",
                "tool", "args_hash", "decision_id")
"""The fields a presented grant is checked against (``gateway.approvals.gate``): whose request it
is, its status (a record whose own status is at odds with the row's is suspect), its approvers'
groups and quorum, the grant issued for it; and those its ``executed`` event is audited with."""


def grant_problem(rec: ApprovalRecord) -> str:
    """Why no grant can be checked against ``rec``, as ``record_problem`` says it; "" when one can
    (damage elsewhere, in its reasons say, does not unbind a grant issued before it)."""
    return next((f"{name}: {problem}" for name, problem in _problems(rec)
                 if name in GRANT_FIELDS or name == WHOLE_RECORD), "")


def past_expiry(rec: ApprovalRecord, now: float) -> bool:
    """Whether ``rec`` is past its expiry; one whose expiry is no time a Timestamp holds (no number,
    infinite, past year 9999: a damaged store) is, rather than pending for ever."""
    return bool(_time(rec.expires_at)) or now >= rec.expires_at


def writable(rec: ApprovalRecord) -> bool:
    """Whether the store can write ``rec`` back (as JSON in UTF-8): its text is all UTF-8."""
    return not any(NOT_UTF8 in problem for _, problem in _problems(rec))


def salvaged(rec: ApprovalRecord) -> ApprovalRecord:
    """``rec`` as it is when every field is whole; else with every bad field replaced by its kind's
    stand-in ("", 0, none) and ``MALFORMED_REASON`` and the first problem as its last reason. The
    arguments are kept as they are when they are text, lone surrogates and all: they are sent as
    bytes (``surrogatepass``), which the CLI shows escaped and marks malformed. A field the store
    could not find is shown as it filled it (its column's value, or blank)."""
    problems = list(_problems(rec))
    if not problems:
        return rec
    bad = {name: _KINDS[_FIELDS[name]][1] for name, _ in _bad_values(rec)}
    if isinstance(rec.args_json, str):
        bad.pop("args_json", None)
    name, problem = problems[0]
    reasons = bad.pop("reasons", rec.reasons)
    return dataclasses.replace(rec, **bad, reasons=(*reasons, f"{MALFORMED_REASON}{name}: {problem}"))
