"""What one ``Approvals.Watch`` stream hears: its own process's events as they happen, and
every change made through another worker or replica, read from the store.

Events are published in-process (``gateway.approvals.events``), so a watcher connected to
worker A never heard of a request made through worker B, nor of an approval submitted to B
for a request it watched: an agent paused on approval waited for its timeout. So each stream
also reads the store every ``tick`` seconds and derives the event from what changed since it
last knew the request:

- first seen pending: ``requested``; pending with new approvers: ``approved`` (a vote);
- ``approved`` (quorum reached, grant made): ``granted``;
- ``rejected`` / ``expired`` / ``executed``: that word.

What a read costs does not grow with the number of pending requests: ``Watch`` by id reads
its one request; an approver's stream reads only its tenant's requests that changed since
its last read (``Store.changed_approvals``, which re-reads the last few seconds so that no
commit is missed) and, when one it knows reaches its expiry, that one.

A change is heard once: a state the stream already knows is not heard again, whether a store
read repeats it or the in-process event for a state a read told comes late. Requests past
their expiry are moved to ``expired`` on the read, as ``Get`` and ``List`` do. Several changes
between two reads are heard as the latest state.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from gateway.models import Identity
from gateway.store.base import RECENT_SECONDS, ApprovalRecord, ApprovalStatus

State = tuple[str, tuple[str, ...], str]
FINAL = frozenset({ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED, ApprovalStatus.EXECUTED})


def state(rec: ApprovalRecord) -> State:
    approvers = rec.approvers if isinstance(rec.approvers, (tuple, list)) else ()  # a damaged row: marked, not read
    return (str(rec.status), tuple(approvers), rec.grant_jti)


_RANK = {str(ApprovalStatus.PENDING): 0, str(ApprovalStatus.APPROVED): 1}


def progress(known: State) -> tuple[int, int]:
    """How far a request has come: pending, approved, then final; votes within pending. A
    request only moves forward, so a state behind the one known is an old one seen late."""
    return _RANK.get(known[0], 2), len(known[1])


def change_event(before: State | None, rec: ApprovalRecord) -> str | None:
    """The event a watcher hears about ``rec`` when it last knew ``before`` (None: never): none
    for the same state, or one behind it (an event queued before a snapshot that showed the
    newer state, or a read that began before a write it raced)."""
    if before == state(rec) or (before is not None and progress(state(rec)) < progress(before)):
        return None
    if rec.status is ApprovalStatus.PENDING:
        return "requested" if before is None else "approved"
    if rec.status is ApprovalStatus.APPROVED:
        return "granted"
    return str(rec.status)


class Follower:
    """One Watch stream's view of the requests it may see (module docstring)."""

    PAGE = 500
    MAX_PAGES = 20
    """At most this many pages of changes per read; the rest waits for the next tick."""

    def __init__(self, service: Any, identity: Identity, approval_id: str = "", *, tick: float = 1.0) -> None:
        self._svc = service
        self._identity = identity
        self._one = approval_id
        self._tick = tick
        self._known: dict[str, tuple[State, bool]] = {}  # id -> (state, told by a store read)
        self._expires: dict[str, float] = {}  # pending or granted requests it knows -> their expiry
        self._forget: dict[str, float] = {}  # final ones -> when a read can no longer repeat them
        self._since: float | None = None  # where the next read of changes starts (store clock)

    def know(self, recs: list[ApprovalRecord]) -> None:
        """What the stream starts from (already told, or not to be told)."""
        for rec in recs:
            self._learn(rec, told=True)

    async def prime(self) -> None:
        """Read what changed in the last few seconds as known, not to be heard: a change made
        before the stream is no event of it."""
        await self._read()

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

    def _learn(self, rec: ApprovalRecord, *, told: bool) -> None:
        self._known[rec.approval_id] = (state(rec), told)
        if rec.status in FINAL:
            self._expires.pop(rec.approval_id, None)
            if rec.approval_id != self._one:  # a stream by id keeps its one request: read again, its final
                # state would be told again (and again, every few seconds, for as long as the stream stays)
                self._forget[rec.approval_id] = time.monotonic() + RECENT_SECONDS + 2 * self._tick
        else:
            self._expires[rec.approval_id] = rec.expires_at

    def _first_word(self, rec: ApprovalRecord) -> bool:
        """An in-process event is heard unless a store read (or the snapshot) already told this
        very state, or a later one."""
        known = self._known.get(rec.approval_id)
        if known is not None and (known == (state(rec), True) or progress(state(rec)) < progress(known[0])):
            return False
        self._learn(rec, told=False)
        return True

    async def _read(self) -> list[tuple[str, ApprovalRecord]]:
        now = time.monotonic()
        for gone in [i for i, at in self._forget.items() if at <= now]:
            del self._forget[gone]
            self._known.pop(gone, None)
        heard = []
        for rec in await self._records():
            if not self._svc.visible(self._identity, rec):
                self._expires.pop(rec.approval_id, None)
                continue
            rec = await self._svc.expire_if_due(rec)
            known = self._known.get(rec.approval_id)
            kind = change_event(known[0] if known else None, rec)
            if kind is not None:
                heard.append((kind, rec))
                self._learn(rec, told=True)
        return heard

    async def _records(self) -> list[ApprovalRecord]:
        store = self._svc.store
        if self._one:
            known = self._known.get(self._one)
            if known is not None and known[0][0] in FINAL:  # nothing follows a final state
                return []
            rec = await store.get_approval(self._one)
            return [] if rec is None else [rec]
        recs: list[ApprovalRecord] = []
        for _ in range(self.MAX_PAGES):
            page, self._since = await store.changed_approvals(
                tenant=self._identity.tenant, since=self._since, limit=self.PAGE)
            recs += page
            if len(page) < self.PAGE:
                break
        # an expiry changes nothing in the store until someone reads the request: read those due
        due = self._svc.clock()
        changed = {r.approval_id for r in recs}
        for approval_id in [i for i, at in self._expires.items() if at <= due and i not in changed]:
            rec = await store.get_approval(approval_id)
            if rec is None:
                self._expires.pop(approval_id, None)
            else:
                recs.append(rec)
        return recs
