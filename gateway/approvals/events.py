"""In-process fan-out of approval events to Watch streams.

Each subscriber has a bounded queue; a subscriber that falls ``maxsize`` events behind is
closed (its stream ends, and the client re-watches with ``include_current``) rather than
holding memory or slowing the publisher.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

from gateway.store.base import ApprovalRecord

EventType = str  # requested | approved | granted | rejected | expired | executed


@dataclass(frozen=True, slots=True)
class ApprovalEvent:
    type: EventType
    record: ApprovalRecord


class Subscription:
    def __init__(self, hub: "EventHub", match: Callable[[ApprovalRecord], bool], maxsize: int) -> None:
        self._hub = hub
        self.match = match
        self.queue: asyncio.Queue[ApprovalEvent | None] = asyncio.Queue(maxsize)
        self.closed = False

    async def next(self, timeout: float) -> ApprovalEvent | None:
        """The next event, or None on timeout."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            return None

    def close(self) -> None:
        self.closed = True
        self._hub._subs.discard(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventHub:
    def __init__(self, maxsize: int = 256) -> None:
        self._subs: set[Subscription] = set()
        self._maxsize = maxsize

    def subscribe(self, match: Callable[[ApprovalRecord], bool]) -> Subscription:
        sub = Subscription(self, match, self._maxsize)
        self._subs.add(sub)
        return sub

    def publish(self, type: EventType, record: ApprovalRecord) -> None:
        for sub in list(self._subs):
            if not sub.match(record):
                continue
            try:
                sub.queue.put_nowait(ApprovalEvent(type, record))
            except asyncio.QueueFull:
                sub.close()
