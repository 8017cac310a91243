"""A regorus engine freed only on the thread that made it.

pyo3 refuses to free a regorus ``Engine`` on any other thread: it reports "unsendable, but is
being dropped on another thread" and leaks it. Reference counting frees an engine where its
last reference goes, which is the thread that uses it; but an engine that a reference cycle
holds (a traceback's frame, say, kept by an exception stored in one of its own frames) is freed
by the cyclic garbage collector, which runs on whichever thread happens to allocate: a
``asyncio.to_thread`` worker, a metrics exporter's. So the policy engines hold each regorus
engine in an ``OwnedEngine`` and keep no other lasting reference to it. An ``OwnedEngine``
collected on another thread hands its engine to ``_strays`` instead of freeing it, and the
owning thread frees its strays the next time it makes, reloads, evaluates with or closes one
(``free_strays``).
"""

from __future__ import annotations

import threading
from typing import Any

import regorus

_strays: list[tuple[int, Any]] = []
"""(owning thread, engine) of engines whose holder was collected on another thread. Only
``append`` and ``pop`` touch it, each atomic under the GIL: no lock, which a collection running
``__del__`` on the very thread that held it would wait on for ever."""


class OwnedEngine:
    """Holds one regorus ``Engine`` (``engine``) for the thread that made it."""

    __slots__ = ("engine", "_owner")

    def __init__(self) -> None:
        self._owner = threading.get_ident()
        self.engine = regorus.Engine()

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)  # None: made no engine (regorus.Engine() raised)
        if engine is not None and threading.get_ident() != self._owner:
            _strays.append((self._owner, engine))


def free_strays() -> None:
    """Free the engines this thread made whose holders were collected on other threads."""
    if not _strays:
        return
    me, others = threading.get_ident(), []
    while True:
        try:
            item = _strays.pop()
        except IndexError:
            break
        if item[0] != me:
            others.append(item)
        item = None  # this thread's own engine is freed here; another's stays in ``others``
    _strays.extend(others)
