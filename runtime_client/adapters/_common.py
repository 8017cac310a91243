"""What the adapters share: the text a framework shows its model, and approval redemption.

``call_text`` turns a gateway ``ToolResult`` into that text. ``ApprovalMemory`` lets an
adapter redeem an approval: it remembers the approval id the gateway returned for
(run, tool, exact arguments), and ``execute`` presents it when the same call comes again,
so a model that retries after approval runs the approved call (the gateway verifies the
approver-signed grant against the hash of the arguments it is given, and runs it once).

Every call carries an idempotency key. A call the adapter sent but never heard back from (a
deadline, a dropped connection, a cancellation) may have run at the gateway, and the model
will likely retry it: the retry carries the same key, so the gateway answers with the stored
outcome instead of running the tool again. So does a retry while the gateway still reports
the first execution running (``execution_in_progress``). Any other answer ends the call: the
next identical call is a new one, with a new key.

Identical calls made concurrently (a framework running a model's tool calls in parallel) go
to the gateway one at a time, so each sees what the one before it left in the memory: while
an approval is pending they all wait on that one request (no orphaned second request for
the approver), and once it is approved exactly one of them runs; the next asks anew.
Different calls still run in parallel.

A call the gateway could not answer (it is down, the API key is rejected, a deadline passed)
is no exception the framework must handle: ``call`` returns it as an error ``CallText`` with
the client error's stable ``code`` (``unavailable``, ``unauthenticated``, ``deadline_exceeded``,
...) and what to do about it (``error_text``).

A call the policy wants more evidence for (``require_more_evidence``) is answered by the
application's ``evidence`` provider, if the adapter was given one (``run_agent``'s contract:
``EvidenceRequest`` in, a dict or None out): the call is sent once more, under the same
idempotency key (nothing ran), with that evidence added. When the provider gives None, or the
policy still wants more, the model is told what is missing (``evidence_required``); when it
raises (or gives no dict), ``EvidenceProviderError`` (``evidence_provider_failed``). A call that
then awaits approval keeps its evidence in the memory beside the approval id, and the approved
call is sent with it (the policy asks for the evidence again before it reads the approval).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import rfc8785

from runtime_client._client import AsyncGatewayClient
from runtime_client._context import label_untrusted, observation_flags, render_tool_output
from runtime_client._decisions import ToolCall, parse_decision
from runtime_client._errors import (
    AuthenticationError, ClientClosedError, GatewayTimeoutError, MalformedRequestError,
    ToolgateClientError, TransportError,
)
from runtime_client._evidence import EvidenceProvider, ask_evidence, evidence_request
from runtime_client._types import ApprovalRequired, EvidenceRequired, Observation, Refused, ToolResult

log = logging.getLogger("runtime_client.adapters")

MAX_TEXT = 16_000
MAX_REMEMBERED_APPROVALS = 1024
STILL_PENDING = "approval_pending"
"""The gateway's refusal code for a call that presents an approval not yet approved."""
STILL_RUNNING = "execution_in_progress"
"""The gateway's refusal code for a call whose key's first execution has not finished."""
KEEP_APPROVAL = frozenset({STILL_PENDING, STILL_RUNNING, "rate_limited", "concurrency_limited"})
"""Refusals after which the approval can still be used: pending, its call still running, or
the call held back before it ran (rate and concurrency limits)."""

_AFTER_APPROVAL = ("The call was NOT executed; once it is approved, the same call with the same "
                   "arguments will proceed (it runs once).")

_Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class CallText:
    is_error: bool
    text: str
    code: str


@dataclass(frozen=True, slots=True)
class _Approval:
    """A remembered approval: its id, and the evidence its call was sent with (None for none)."""

    approval_id: str
    evidence: dict[str, Any] | None = None


class EvidenceProviderError(ToolgateClientError):
    """The adapter's evidence provider raised, or gave something that is no evidence (not a
    dict of JSON values, nor None), when the gateway asked for more: the call did not run.
    ``result`` is that gateway answer (``EvidenceRequired``); the cause is chained."""

    code = "evidence_provider_failed"

    def __init__(self, result: ToolResult, cause: Exception) -> None:
        # only the type reaches the model: the application's own words may hold what it must not see
        super().__init__(f"the provider raised {type(cause).__name__}")
        self.result = result
        log.warning("evidence_provider_failed", exc_info=cause)


@dataclass(slots=True)
class _Turns:
    """The calls with one key that are in flight or waiting, taking turns on ``lock``."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ApprovalMemory:
    """Approval ids (with the evidence their calls were sent with) by (run id, tool, canonical
    arguments), newest last, at most ``limit``; and the idempotency keys of calls not yet
    answered, as many.

    The key is the arguments' RFC 8785 canonical JSON, as the gateway hashes them for the
    grant's binding (``{"amount": 400}`` and ``{"amount": 400.0}`` are one call there, so one
    here); it is only for lookup: the gateway itself re-checks the grant's binding. An entry
    lives while the approval can still be used (``KEEP_APPROVAL``) and is forgotten once the
    call returns anything else (executed, refused, rejected, expired). ``turn(key)`` lets calls
    with the same key reach the gateway one at a time.
    """

    def __init__(self, limit: int = MAX_REMEMBERED_APPROVALS) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._limit = limit
        self._ids: OrderedDict[_Key, _Approval] = OrderedDict()
        self._unanswered: OrderedDict[_Key, str] = OrderedDict()
        self._turns: dict[_Key, _Turns] = {}

    @asynccontextmanager
    async def turn(self, key: _Key | None) -> AsyncIterator[None]:
        """Wait until no other call with ``key`` is at the gateway (None: no wait)."""
        if key is None:
            yield
            return
        turns = self._turns.setdefault(key, _Turns())
        turns.users += 1
        try:
            async with turns.lock:
                yield
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[key]

    def __len__(self) -> int:
        return len(self._ids)

    @staticmethod
    def key(run_id: str, tool: str, args: dict[str, Any]) -> _Key | None:
        """The lookup key, or None when ``args`` has no canonical JSON form (the gateway
        refuses it)."""
        canonical = canonical_args(args)
        return None if canonical is None else (run_id, tool, canonical)

    def get(self, key: _Key | None) -> str:
        remembered = self._ids.get(key) if key is not None else None
        return remembered.approval_id if remembered is not None else ""

    def evidence(self, key: _Key | None) -> dict[str, Any] | None:
        """The evidence the call awaiting the remembered approval was sent with, if any."""
        remembered = self._ids.get(key) if key is not None else None
        return remembered.evidence if remembered is not None else None

    def update(self, key: _Key | None, result: ToolResult, evidence: dict[str, Any] | None = None) -> None:
        """Remember a new approval id, with the ``evidence`` the call was sent with; keep them
        while the approval can still be used; forget them on any other outcome. The call was
        answered: its idempotency key is dropped unless the gateway is still running the first
        execution under it."""
        if key is None:
            return
        o = result.outcome
        if not (isinstance(o, Refused) and o.code == STILL_RUNNING):
            self._unanswered.pop(key, None)
        if isinstance(o, ApprovalRequired) and o.approval_id:
            _put(self._ids, key, _Approval(o.approval_id, evidence), self._limit)
        elif not (isinstance(o, Refused) and o.code in KEEP_APPROVAL):
            self._ids.pop(key, None)

    def idempotency_key(self, key: _Key | None) -> str:
        """The key to send: the one of this call's unanswered attempt, else a new one (kept
        until the call is answered, see ``update``)."""
        if key is None:  # no JSON form: the gateway refuses it before any key matters
            return ""
        sent = self._unanswered.get(key)
        if sent is None:
            sent = f"adapter:{uuid.uuid4()}"
            _put(self._unanswered, key, sent, self._limit)
        return sent


def canonical_args(args: Any) -> str | None:
    """``args`` as RFC 8785 (JCS) canonical JSON, the form the gateway hashes (``args_hash``,
    ``gateway.arguments.canonical_json``; not imported: it pulls in the schema validator), or
    None when it has none. An integer past ±(2^53-1) is taken, as the gateway takes it, only when
    its digits are the JCS text of a double."""
    try:
        return rfc8785.dumps(args).decode()
    except rfc8785.IntegerDomainError:
        try:
            return rfc8785.dumps(_as_doubles(args)).decode()
        except (rfc8785.CanonicalizationError, RecursionError, _NoDouble):
            return None
    except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError):
        return None


class _NoDouble(ValueError):
    pass


def _as_doubles(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _as_doubles(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_doubles(v) for v in value]
    if type(value) is int and abs(value) > _MAX_SAFE_INTEGER:
        try:
            double = float(value)
        except OverflowError:
            raise _NoDouble() from None
        if rfc8785.dumps(double).decode() != str(value):
            raise _NoDouble()
        return double
    return value


_MAX_SAFE_INTEGER = 2**53 - 1


def _put(entries: OrderedDict[_Key, Any], key: _Key, value: Any, limit: int) -> None:
    entries[key] = value
    entries.move_to_end(key)
    while len(entries) > limit:
        entries.popitem(last=False)


async def execute(client: AsyncGatewayClient, memory: ApprovalMemory, tool: str,
                  args: dict[str, Any], *, run_id: str = "",
                  evidence: EvidenceProvider | None = None) -> ToolResult:
    """One adapter call: presents the remembered approval id for this exact call, if any, with
    the evidence its call was sent with, and the idempotency key of its unanswered attempt, if
    any (else a new one). When the gateway wants more evidence, ``evidence`` (if given) is
    asked, and the call sent once more with what it gives, under the same key.

    Identical calls take turns (``ApprovalMemory.turn``), so concurrent ones share one
    pending approval and one approval runs one of them. A transport error (or a cancellation)
    leaves both in place: the gateway may have run the call, and the retry hears its stored
    outcome instead of running it twice. A failing provider raises ``EvidenceProviderError``."""
    key = memory.key(run_id, tool, args)
    async with memory.turn(key):
        fields = _fields(memory, key)
        result = await client.execute(tool, args, run_id=run_id, **fields)
        if evidence is not None and isinstance(result.outcome, EvidenceRequired):
            try:
                more = await _more_evidence(evidence, tool, args, result, fields.get("evidence"))
            except EvidenceProviderError:
                memory.update(key, result)  # answered: nothing ran, the next call is a new one
                raise
            if more is not None:
                fields["evidence"] = more
                result = await client.execute(tool, args, run_id=run_id, **fields)
        memory.update(key, result, fields.get("evidence"))
    return result


def _fields(memory: ApprovalMemory, key: _Key | None) -> dict[str, Any]:
    """What a call is sent with besides its arguments: the remembered approval id and its
    evidence, and the idempotency key."""
    fields: dict[str, Any] = {}
    if approval_id := memory.get(key):
        fields["approval_id"] = approval_id
    if (given := memory.evidence(key)) is not None:
        fields["evidence"] = given
    if idempotency_key := memory.idempotency_key(key):
        fields["idempotency_key"] = idempotency_key
    return fields


async def _more_evidence(provider: EvidenceProvider, tool: str, args: dict[str, Any], result: ToolResult,
                         given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The evidence to send the call again with (``given`` and what ``provider`` adds), or None
    when the provider gives None. Whatever it raises, or a gift that is no JSON object,
    becomes ``EvidenceProviderError``: no exception of the application's reaches the framework."""
    try:
        more = await ask_evidence(provider, evidence_request(tool, args, result.outcome, given))
        if more is None:
            return None
        merged = {**(given or {}), **more}
        parse_decision(ToolCall(tool, args, merged))  # JSON, checked as run_agent checks it
        return merged
    except Exception as exc:
        raise EvidenceProviderError(result, exc) from exc


MAX_ERROR_DETAIL = 300
"""Characters of a client error's own text (the gateway's or a proxy's words) in ``error_text``."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_RETRY_SAME = ("Retrying the same call with the same arguments is safe: it carries the same "
               "idempotency key, so the gateway runs it at most once.")


def error_text(exc: ToolgateClientError) -> CallText:
    """A client error (no answer from the gateway) as the error text a framework shows its
    model: ``gateway error (<code>): <what happened and what to do>. Detail: <the error's text>``.
    ``code`` is ``exc.code``, e.g. ``unavailable``, ``unauthenticated``, ``deadline_exceeded``."""
    code = getattr(exc, "code", "") or "client_error"
    if isinstance(exc, EvidenceProviderError):
        missing = exc.result.outcome.missing if isinstance(exc.result.outcome, EvidenceRequired) else ()
        what = (f"the gateway asked for more evidence ({json.dumps(list(missing))}) and the application's "
                "evidence provider failed; the call was NOT executed. Retrying asks the provider again.")
    elif isinstance(exc, AuthenticationError):
        what = ("the gateway rejected this agent's credentials (API key or its role); the call was "
                "NOT executed. Retrying will not help: the operator must fix the agent's API key "
                "(TOOLGATE_API_KEY).")
    elif isinstance(exc, ClientClosedError):
        what = ("the adapter's gateway client was closed; if it closed while the call was on its way, "
                "the call may have run. The host application must create a new client; " + _RETRY_SAME)
    elif isinstance(exc, GatewayTimeoutError):
        what = ("the gateway did not answer in time; the call may or may not have run. " + _RETRY_SAME)
    elif isinstance(exc, MalformedRequestError):
        what = "the gateway rejected the request as malformed; the call was NOT executed."
    elif isinstance(exc, TransportError):
        what = ("the toolgate gateway could not be reached or the connection failed; the call "
                "may not have run. Wait and retry, or tell the user the gateway is unavailable. "
                + _RETRY_SAME)
    else:
        what = "the call could not be completed."
    detail = _CONTROL.sub(" ", str(exc))
    detail = detail if len(detail) <= MAX_ERROR_DETAIL else detail[:MAX_ERROR_DETAIL] + "…"
    return CallText(True, f"gateway error ({code}): {what} Detail: {detail}", code)


async def call(client: AsyncGatewayClient, memory: ApprovalMemory, tool: str,
               args: dict[str, Any], *, run_id: str = "",
               evidence: EvidenceProvider | None = None) -> tuple[CallText, ToolResult | None]:
    """``execute`` then ``call_text``: what the framework shows, and the gateway's result (None
    when a client error, turned into ``error_text``, stood in for it; the evidence request a
    failing provider could not answer)."""
    try:
        result = await execute(client, memory, tool, args, run_id=run_id, evidence=evidence)
    except EvidenceProviderError as exc:
        return error_text(exc), exc.result
    except ToolgateClientError as exc:
        return error_text(exc), None
    return call_text(result), result


def _observation_text(result: ToolResult, o: Observation) -> CallText:
    flags = observation_flags(o)
    if o.ok:
        return CallText(False, label_untrusted(result.tool, render_tool_output(o.data), MAX_TEXT, flags),
                        "ok")
    message = o.error.message if o.error else o.summary  # carries the tool's stderr: untrusted
    return CallText(True, f"tool {result.tool} failed:\n"
                    + label_untrusted(result.tool, message, MAX_TEXT, flags), result.code or "tool_error")


def call_text(result: ToolResult) -> CallText:
    o = result.outcome
    if isinstance(o, Observation):
        return _observation_text(result, o)
    if isinstance(o, Refused):
        reasons = "; ".join(o.reasons) or "no reason given"
        if o.code == STILL_PENDING:
            return CallText(True, f"approval still pending: {reasons}. {_AFTER_APPROVAL}", o.code)
        fields = "".join(f"\n  {e.path or '/'}: {e.message}" for e in o.field_errors)
        return CallText(True, f"refused ({o.code}): {reasons}{fields}", o.code)
    if isinstance(o, ApprovalRequired):
        who = ", ".join(o.approver_groups) or "an approver"
        return CallText(True, f"approval required (approval_id={o.approval_id}): waiting for {who}. "
                        f"{_AFTER_APPROVAL} Reasons: {'; '.join(o.reasons) or '-'}",
                        "approval_required")
    if isinstance(o, EvidenceRequired):
        return CallText(True, f"more evidence required: {json.dumps(list(o.missing))}", "evidence_required")
    raise TypeError(f"unknown outcome {type(o).__name__}")
