"""WAL checkpoints from a background thread, so that no call pays for the copying.

SQLite's automatic checkpoint runs inside whichever commit crosses the WAL size limit: that
call copies ~1,000 pages into the database file and fsyncs twice, on the event loop,
holding up every call on that worker for ~4.6 ms (measured), every few hundred calls; it was
the largest part of the gateway's p99 in the open-loop benchmark. So the serving connection
has ``wal_autocheckpoint=0`` and:

- this thread, on its own connection, runs a PASSIVE checkpoint every ``interval`` seconds:
  it copies what the WAL holds into the database file without waiting for a lock or
  blocking a writer, and the sqlite3 module releases the GIL meanwhile.
- a passive checkpoint alone never lets the WAL start over under continuous writes (a
  writer restarts the WAL only if it finds every frame already copied; measured: 73 MB after
  12 s). So once the WAL holds ``restart_frames`` or more, the thread sets ``restart_due``
  and the serving connection, after its next write, runs a RESTART checkpoint itself
  (``SQLiteStore._run``): it copies only the frames written since the passive one, and the
  WAL starts over at the next write. That costs the loop ~1-2 ms (mostly the two fsyncs)
  about once a second at full load, instead of ~4.6 ms several times a second. Until it
  has, the thread looks every ``interval / 10`` and does not checkpoint (it would hold the
  checkpoint lock the restart needs).

The WAL file thus stays near ``restart_frames`` pages (4,000: 16 MB) or what is written in
one ``interval``, whichever is more (a gateway worker writes ~1,500 pages in 0.25 s).

The restart is not run from this thread's connection: measured, a RESTART from a second
connection in the same process could leave the serving connection's writes failing with
SQLITE_BUSY for seconds.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("toolgate.store")


class WalCheckpointer:
    def __init__(self, path: Path, *, interval: float = 0.25, restart_frames: int = 4000) -> None:
        self._interval = interval
        self._restart_frames = restart_frames
        self._db = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=NORMAL")  # as the serving connection: WAL synced before, db after
        self._stop = threading.Event()
        self.restart_due = False
        """Set here, cleared by the serving connection once it has run a RESTART checkpoint."""
        self._thread = threading.Thread(target=self._run, name="toolgate-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stop.wait(self._interval / 10 if self.restart_due else self._interval):
                if self.restart_due:  # the serving connection has not restarted yet: leave it the checkpoint lock
                    continue
                try:
                    _busy, frames, _copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
                    failures = 0
                except sqlite3.Error as exc:  # the next turn retries
                    failures += 1
                    if failures in (10, 1000):
                        log.warning("wal_checkpoint_failing", error=str(exc)[:200], failures=failures)
                    continue
                if frames >= self._restart_frames:
                    self.restart_due = True
        finally:
            self._db.close()

    def stop(self) -> None:
        """Stop the thread (a last checkpoint is the closing connection's)."""
        self._stop.set()
        self._thread.join(timeout=5)
