"""What one ``Approvals.Watch`` stream hears: its own process's events as they happen, and
every change made through another worker or replica, read from the store.

Events are published in-process (``gateway.approvals.events``), so a watcher connected to
worker A never heard of a request made through worker B, nor of an approval submitted to B
for a request it watched: an agent paused on approval waited for its timeout. So each stream
also reads the store every ``tick`` seconds — its one request (``Watch`` by id), or the
tenant's pending requests plus those it saw pending or granted — and derives the event from
what changed since it last knew the request:

- first seen pending: ``requested``; pending with new approvers: ``approved`` (a vote);
- ``approved`` (quorum reached, grant made): ``granted``;
- ``rejected`` / ``expired`` / ``executed``: that word.

A change is heard once: when the store read told it first, the in-process event for the very
same state is dropped. Requests past their expiry are moved to ``expired`` on the read, as
``Get`` and ``List`` do. Several changes between two reads are heard as the latest state.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from gateway.models import Identity
from gateway.store.base import ApprovalRecord, ApprovalStatus

State = tuple[str, tuple[str, ...], str]
FINAL = frozenset({ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED, ApprovalStatus.EXECUTED})


def state(rec: ApprovalRecord) -> State:
    return (str(rec.status), tuple(rec.approvers), rec.grant_jti)


def change_event(before: State | None, rec: ApprovalRecord) -> str | None:
    """The event a watcher hears about ``rec`` when it last knew ``before`` (None: never)."""
    if before == state(rec):
        return None
    if rec.status is ApprovalStatus.PENDING:
        return "requested" if before is None else "approved"
    if rec.status is ApprovalStatus.APPROVED:
        return "granted"
    return str(rec.status)


class Follower:
    """One Watch stream's view of the requests it may see (module docstring)."""

    def __init__(self, service: Any, identity: Identity, approval_id: str = "", *, tick: float = 1.0) -> None:
        self._svc = service
        self._identity = identity
        self._one = approval_id
        self._tick = tick
        self._known: dict[str, tuple[State, bool]] = {}  # id -> (state, told by a store read)
        self._finished: set[str] = set()  # final at the last read: forgotten at the next (not re-read)

    def know(self, recs: list[ApprovalRecord]) -> None:
        """What the stream starts from (already told, or not to be told)."""
        for rec in recs:
            self._known[rec.approval_id] = (state(rec), True)

    async def events(self, sub: Any) -> AsyncIterator[tuple[str, ApprovalRecord]]:
        """(event type, record) until the subscription closes."""
        due = time.monotonic() + self._tick
        while not sub.closed:
            event = await sub.next(max(0.01, due - time.monotonic()))
            if event is not None and self._first_word(event.record):
                yield event.type, event.record
            if time.monotonic() >= due:
                for heard in await self._read():
                    yield heard
                due = time.monotonic() + self._tick

    def _first_word(self, rec: ApprovalRecord) -> bool:
        """An in-process event is heard unless a store read already told this very state."""
        now = state(rec)
        told = self._known.get(rec.approval_id) == (now, True)
        self._known[rec.approval_id] = (now, False)
        return not told

    async def _read(self) -> list[tuple[str, ApprovalRecord]]:
        for done in self._finished:
            self._known.pop(done, None)
        self._finished = set()
        heard = []
        for rec in await self._records():
            if not self._svc.visible(self._identity, rec):
                continue
            rec = await self._svc.expire_if_due(rec)
            known = self._known.get(rec.approval_id)
            kind = change_event(known[0] if known else None, rec)
            if kind is not None:
                heard.append((kind, rec))
                self._known[rec.approval_id] = (state(rec), True)
            if rec.status in FINAL and not self._one:
                self._finished.add(rec.approval_id)
        return heard

    async def _records(self) -> list[ApprovalRecord]:
        store = self._svc.store
        if self._one:
            known = self._known.get(self._one)
            if known is not None and known[0][0] in FINAL:  # nothing follows a final state
                return []
            rec = await store.get_approval(self._one)
            return [] if rec is None else [rec]
        recs = await store.list_approvals(tenant=self._identity.tenant, status=ApprovalStatus.PENDING)
        listed = {r.approval_id for r in recs}
        for approval_id, (known, _) in list(self._known.items()):
            if approval_id not in listed and known[0] not in FINAL:  # was pending or granted: what now?
                rec = await store.get_approval(approval_id)
                if rec is not None:
                    recs.append(rec)
        return recs
