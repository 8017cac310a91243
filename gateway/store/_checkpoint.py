"""WAL checkpoints from a background thread, so that no call pays for one.

SQLite's automatic checkpoint runs inside whichever commit crosses the WAL size limit: that
call copies ~1,000 pages into the database file and fsyncs it, on the event loop, every few
hundred calls. With ``wal_autocheckpoint=0`` on the serving connection, this thread's own
connection runs ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval`` seconds instead: a
passive checkpoint never waits for a lock and never blocks a writer (one that finds another
process checkpointing just skips its turn), and the sqlite3 module releases the GIL while it
works. The WAL then holds at most ``interval`` seconds of writes.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


class WalCheckpointer:
    def __init__(self, path: Path, *, interval: float = 0.5) -> None:
        self._path = path
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolgate-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        db = sqlite3.connect(self._path, isolation_level=None, timeout=0, check_same_thread=False)
        try:
            while not self._stop.wait(self._interval):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    continue  # locked or busy: the next turn checkpoints
        finally:
            db.close()

    def stop(self) -> None:
        """Stop the thread (a last checkpoint is the closing connection's)."""
        self._stop.set()
        self._thread.join(timeout=5)
