"""What the model is shown of a refusal's field errors and of an approver's rejection reason:
the gateway's and a person's words, kept to one line or quoted, and cut."""

from __future__ import annotations

import json
import re

from runtime_client._types import Refused

MAX_FIELD_ERRORS = 10
"""The gateway's field errors of a refusal shown to the model (the rest counted)."""
MAX_FIELD_ERROR_CHARS = 200
"""Characters of one field error's path, and of its message, shown to the model."""
MAX_REJECTION_REASON = 500
"""Characters of an approver's rejection reason shown to the model."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (control characters and line breaks as a space), cut to ``limit``."""
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[:limit] + "…"


def shown_field_errors(o: Refused) -> tuple[list[dict[str, str]], str]:
    """The refusal's field errors, capped, for the observation's data and the model's note.

    They are the gateway's words on the call's arguments (the JSON pointer of each bad value
    and what is wrong with it), the model needs them to correct its arguments. A message may
    quote an argument value, so each is kept to one line and cut."""
    shown = [{"path": one_line(e.path or "/", MAX_FIELD_ERROR_CHARS),
              "message": one_line(e.message, MAX_FIELD_ERROR_CHARS)}
             for e in o.field_errors[:MAX_FIELD_ERRORS]]
    if not shown:
        return [], ""
    more = len(o.field_errors) - len(shown)
    lines = "".join(f"\n  - {e['path']}: {e['message']}" for e in shown)
    tail = f"\n  … and {more} more" if more > 0 else ""
    return shown, f"\nfield errors reported by the gateway:{lines}{tail}"


def quoted_reason(reason: str) -> str:
    """An approver's rejection reason, cut and quoted as a JSON string (its quotes and line
    breaks escaped): free text someone wrote, shown as such, never as the runtime's words."""
    cut = reason if len(reason) <= MAX_REJECTION_REASON else reason[:MAX_REJECTION_REASON] + "…"
    return json.dumps(cut, ensure_ascii=False)
