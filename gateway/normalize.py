"""Normalize an executor result into an Observation: scrubbed, capped, flagged, typed.

Order matters and is fixed:

1. **scrub** — every credential value injected for this call (and its encodings) and common
   secret shapes are removed from data (keys and values), stderr and the error message; the
   count goes to ``redactions``. Scrubbing runs before capping so truncation cannot cut a
   secret in half and let its prefix through.
   Every cut of output (data, the error message, the summary) comes after this.
2. **cap** — data above ``max_bytes`` (serialized) is cut, ``truncated: true``.
3. **flag** — instruction-like content in what the observation shows the model gives
   ``possible_prompt_injection``; nothing is changed. All it shows is scanned: the summary, the
   error's type and message (the stderr's tail in it), each string in the data (read from what
   was kept: the part shown and the margin), and the data's JSON text as sent, or the start of it
   that it was cut to, for what only the text shows (an instruction over neighbouring strings, a
   ``"tool_calls":`` key: ``injection.json_text_flags``). Not the rest of the stderr, which is not
   shown: scanning a large stderr from its start, up to a cut-off, missed the end the model saw.

A failed result's error message is the (scrubbed) message trimmed to ``ERROR_MESSAGE_CHARS``,
plus the tail of the tool's (scrubbed) stderr so an agent can see why it failed. The outcome
code comes from the error type (``timeout`` → ``tool_timeout``, ``egress_denied``, otherwise
``tool_error``). Data nested deeper than the arguments' limit is kept as its JSON text.

Data is made JSON before all this (``gateway.jsonable``): a mapping key that is not text becomes text, and
where that text equals another key of the same mapping it gets the first free ``#n`` suffix (n = 2,
3, ...; ``scrub.distinct_keys``), so no value is lost: ``{1: "x", "1": "y"}`` gives
``{"1#2": "x", "1": "y"}``. A key that was text keeps its name; the suffix comes before scrubbing
and flagging, which see every key and value.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gateway.codes import Code
from gateway.executors.base import ExecResult
from gateway.injection import injection_flags, json_text_flags
from gateway.json_encode import encoder
from gateway.jsonable import Keep, jsonable, utf8_text
from gateway.models import CallContext, ErrorInfo, Observation, Provenance
from gateway.scrub import Scrubber

SUMMARY_CHARS = 200
STDERR_TAIL_CHARS = 2000
ERROR_MESSAGE_CHARS = 2000

_ERROR_CODES = {
    "timeout": Code.TOOL_TIMEOUT,
    "tool_timeout": Code.TOOL_TIMEOUT,
    "egress_denied": Code.EGRESS_DENIED,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Clean:
    data: Any
    stderr: str
    error: ErrorInfo | None
    redactions: int
    cut: bool = False
    """Data was left out before scrubbing (more than an observation can show: ``jsonable.Keep``)."""


def normalize(ctx: CallContext, result: ExecResult, duration_ms: int, max_bytes: int) -> Observation:
    clean = scrub_result(result, getattr(ctx.credentials, "secret_values", ()), max_bytes=max_bytes)
    data, truncated = _cap(clean.data, max_bytes)
    common = dict(
        data=data, provenance=_provenance(ctx),
        truncated=truncated or clean.cut or bool(result.meta.get("truncated")),
        duration_ms=duration_ms, attempts=result.attempts, redactions=clean.redactions,
    )
    if result.ok:
        summary = _summary(data)
        return Observation(status="ok", summary=summary, flags=_flags(clean, data, truncated, summary), **common)
    error = clean.error or ErrorInfo("unknown", "unknown error")
    message = error.message[:ERROR_MESSAGE_CHARS]  # scrubbed already: the cut cannot split a secret
    if clean.stderr.strip():
        message = f"{message}; stderr: {clean.stderr[-STDERR_TAIL_CHARS:]}"
    error = dataclasses.replace(error, message=message)
    summary = f"{ctx.tool.name} failed: {error.message}"[:SUMMARY_CHARS]
    flags = _flags(clean, data, truncated, summary, error.type, error.message)
    return Observation(
        status="error", summary=summary, error=error, flags=flags,
        code=_ERROR_CODES.get(error.type, Code.TOOL_ERROR), **common,
    )


def _flags(clean: _Clean, data: Any, cut: bool, *shown: str) -> tuple[str, ...]:
    """The flags of what an observation shows: ``shown`` (its summary, the error's type and
    message), each string of its data (those kept, ``clean.data``: the part shown and the margin),
    and the data as sent, its JSON text (or, ``cut``, the start of it that ``data`` then is)."""
    return injection_flags(*shown, clean.data) or json_text_flags(data if cut else _encode_data(data))


def scrub_result(result: ExecResult, secrets: Any, *, max_bytes: int | None = None) -> _Clean:
    """Data, stderr and error message with secrets removed, and how many were removed.

    With ``max_bytes`` (the observation's cap), only as much of the data and the error message is
    kept as the observation can show, and a margin more (``jsonable.Keep``); ``cut`` says whether
    anything was left out, and ``redactions`` counts what was removed from what was kept. Stderr,
    of which the observation shows the end, is scrubbed whole (a secret that begins before the end
    would not be recognised from its middle); the executors cap it."""
    scrubber = Scrubber(secrets) if secrets else _PATTERNS_ONLY
    keep = Keep(max_bytes + scrubber.margin(), scrubber) if max_bytes is not None else None
    data, n_data = scrubber.data(jsonable(result.data, keep))
    stderr, n_err = scrubber.text(utf8_text(result.stderr or ""))
    error, n_msg = result.error, 0
    if error is not None:
        text = error.message
        if keep is not None:
            text = Keep(ERROR_MESSAGE_CHARS, scrubber).text(text)  # the observation shows no more of it
        message, n_msg = scrubber.text(utf8_text(text))
        kind, n_type = scrubber.text(utf8_text(error.type))
        error = ErrorInfo(type=kind, message=message, retryable=error.retryable)
        n_msg += n_type
    return _Clean(data, stderr, error, n_data + n_err + n_msg, bool(keep and keep.cut))


_PATTERNS_ONLY = Scrubber(())
"""The scrubber of a call with no credential values: the secret shapes alone (it keeps no state)."""


def _provenance(ctx: CallContext) -> Provenance:
    return Provenance(
        tool=ctx.tool.name,
        tool_version=ctx.tool.config.version,
        args_hash=ctx.args_hash,
        decision_id=ctx.decision_id,
        approval_id=getattr(ctx.approval, "approval_id", "") if ctx.approval else "",
    )


def data_json(data: Any) -> bytes:
    """The observation's data as sent (``data_json``): what ``max_bytes`` bounds."""
    return _encode_data(data).encode()


_encode_data = encoder(ensure_ascii=False, separators=(",", ":"))
"""json.dumps(data, ensure_ascii=False, separators=(",", ":")), one encoder for every call."""


def _cap(data: Any, max_bytes: int) -> tuple[Any, bool]:
    """``data``, or when its JSON is over ``max_bytes`` the start of that JSON text, as a string
    whose own JSON (quotes and escapes included) fits."""
    text = data_json(data)
    if len(text) <= max_bytes:
        return data, False
    cut = text[:max_bytes].decode("utf-8", errors="ignore")
    while (over := len(data_json(cut)) - max_bytes) > 0:  # each character costs at least one byte
        cut = cut[:len(cut) - over]
    return cut, True


def _summary(data: Any) -> str:
    if isinstance(data, str):
        text = data
    elif isinstance(data, dict):
        text = "object with keys: " + ", ".join(str(k) for k in list(data)[:10])
    elif isinstance(data, list):
        text = f"list of {len(data)} items"
    else:
        text = json.dumps(data, default=str)
    return text[:SUMMARY_CHARS]
