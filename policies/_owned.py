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

    __slots__ = ("engine", "_owner", "_pristine")

    def __init__(self, engine: Any = None, pristine: Any = None) -> None:
        self._owner = threading.get_ident()
        self.engine = regorus.Engine() if engine is None else engine
        self._pristine = pristine

    def seal(self) -> None:
        """Keep a copy of the loaded engine, before any evaluation, for ``renewed``."""
        self._pristine = self.engine.clone()

    def renewed(self) -> OwnedEngine:
        """A fresh engine with the same policies and data, from the copy ``seal`` kept. A panic in
        regorus (``is_panic``) leaves its engine's evaluation state behind: every later evaluation
        of a rule the panicking one was in fails as "recursion detected"."""
        base = self._pristine if self._pristine is not None else self.engine
        return OwnedEngine(base.clone(), self._pristine)

    def __del__(self) -> None:
        if threading.get_ident() == self._owner:
            return
        for engine in (getattr(self, "engine", None), getattr(self, "_pristine", None)):
            if engine is not None:  # None: made no engine (regorus.Engine() raised), or sealed none
                _strays.append((self._owner, engine))


def is_panic(exc: BaseException) -> bool:
    """A Rust panic inside regorus, which pyo3 raises as ``pyo3_runtime.PanicException``: a
    ``BaseException``, so ``except Exception`` lets it through. Agent-controlled strings can cause
    one (``time.parse_duration_ns("9é")``, ``strings.count(s, "")`` in regorus 0.13)."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


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
