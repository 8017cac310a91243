"""WAL checkpoints from a background thread, so that no call pays for one.

SQLite's automatic checkpoint runs inside whichever commit crosses the WAL size limit: that
call copies ~1,000 pages into the database file and fsyncs it, on the event loop, holding up
every call on that worker for a few milliseconds, every few hundred calls (measured: it was
the largest part of the gateway's p99 in the open-loop benchmark). So the serving connection has
``wal_autocheckpoint=0``, and this thread, on its own connection, does the work:

- every ``interval`` seconds a PASSIVE checkpoint copies what the WAL holds into the
  database file. It never waits for a lock and never blocks a writer, and the sqlite3 module
  releases the GIL while it works, so the event loop goes on meanwhile.
- a passive checkpoint alone never lets the WAL start over under continuous writes (a
  writer restarts the WAL only if it finds every frame already copied; measured: 73 MB after
  12 s). So once the WAL holds ``restart_frames`` or more, a RESTART checkpoint follows: it
  takes the write lock, copies the few frames written since the passive one and, once no
  reader is left in the WAL, lets the next writer start it over. It does not wait for the
  lock or for readers (next turn it tries again) until the WAL is ``_PATIENT`` times too
  long. Writers meanwhile find the database locked and retry without blocking their loop
  (``SQLiteStore._run``).

The WAL thus stays near ``restart_frames`` pages (4,000: 16 MB), and each checkpoint's two
fsyncs happen a few times a second, off the loop. A restart holds the write lock for about
1-2 ms (measured), which writers ride out without blocking their loop.
If a checkpoint fails (locked by another process's checkpointer, say), the next turn retries.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("toolgate.store")

_PATIENT = 8  # WAL length, in multiples of restart_frames, past which a restart waits for the lock


class WalCheckpointer:
    def __init__(self, path: Path, *, interval: float = 0.25, restart_frames: int = 4000, lock_wait: float = 0.1) -> None:
        self._interval = interval
        self._restart_frames = restart_frames
        self._lock_wait_ms = int(lock_wait * 1000)
        self._db = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=NORMAL")  # as the serving connection: WAL synced before, db after
        self._stop = threading.Event()
        self.restarts = 0
        self._thread = threading.Thread(target=self._run, name="toolgate-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stop.wait(self._interval):
                try:
                    self._turn()
                    failures = 0
                except sqlite3.Error as exc:  # the next turn retries
                    failures += 1
                    if failures in (10, 1000):
                        log.warning("wal_checkpoint_failing", error=str(exc)[:200], failures=failures)
        finally:
            self._db.close()

    def _turn(self) -> None:
        """A passive checkpoint, and a restarting one if the WAL is long (see the module docstring).

        The restart does not wait: with no busy timeout it gives up at once if another
        connection holds the write lock, and retries next turn; only when the WAL has grown
        to ``_PATIENT`` times its limit does it wait (up to ``lock_wait``) for the lock.
        """
        _busy, frames, _copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames < self._restart_frames:
            return
        patient = frames >= self._restart_frames * _PATIENT
        self._db.execute(f"PRAGMA busy_timeout={self._lock_wait_ms if patient else 0}")
        busy, _frames, _copied = self._db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        self.restarts += not busy

    def stop(self) -> None:
        """Stop the thread (a last checkpoint is the closing connection's)."""
        self._stop.set()
        self._thread.join(timeout=5)
