"""Durable checkpoints of a run: state plus its event log. SQLite file by default."""

from __future__ import annotations

import json
import os
import stat
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from runtime_client._errors import CheckpointError, CheckpointNotFoundError
from runtime_client._events import Event, apply
from runtime_client._state import AgentState

DEFAULT_PATH_ENV = "TOOLGATE_CHECKPOINTS"
DEFAULT_PATH = ".toolgate/checkpoints.sqlite3"


class CheckpointStore(Protocol):
    def save(self, state: AgentState, events: list[Event]) -> None: ...
    def load(self, run_id: str) -> tuple[AgentState, list[Event]]: ...


class MemoryCheckpoints:
    """Checkpoints in a dict (tests, short-lived processes). Stores copies."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[str, str]] = {}

    def save(self, state: AgentState, events: list[Event]) -> None:
        self._runs[state.run_id] = (state.to_json(), json.dumps([e.to_dict() for e in events]))

    def load(self, run_id: str) -> tuple[AgentState, list[Event]]:
        if run_id not in self._runs:
            raise CheckpointNotFoundError(run_id)
        state, events = self._runs[run_id]
        return AgentState.from_json(state), [Event.from_dict(e) for e in json.loads(events)]


class SQLiteCheckpoints:
    """One run per row in a SQLite file (WAL); survives process restarts.

    A save writes only the events the file does not hold yet, and the state only now and then
    (a snapshot, when the events since the last one are as many as those before it); a load
    takes the snapshot and applies the events after it, as ``EventLog.record`` did to make the
    state (``runtime_client._events.apply``). So a run's saves write about as much as the run
    holds in all, where writing the whole state and log at every step grew with the square of
    its length. ``save`` is given the state its events make, as the loop always does.

    A checkpoint holds the run's goal, messages, tool outputs and approval ids, so the folders
    the store makes are 0700 and its file 0600 (SQLite gives the WAL files the file's mode);
    a folder that exists already is left as it is, a file made before (by an older version) is
    made 0600 too. A file an older version wrote (each row's whole log in its ``events``
    column) is read as it is, and moves to this layout at its run's next save."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path or os.environ.get(DEFAULT_PATH_ENV, DEFAULT_PATH))
        self._lock = threading.Lock()
        try:
            _private_folders(self.path.parent)
            _private_file(self.path)
            with self._connect() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("CREATE TABLE IF NOT EXISTS checkpoints (run_id TEXT PRIMARY KEY,"
                           " state TEXT NOT NULL, events TEXT NOT NULL,"
                           " updated_at REAL DEFAULT (unixepoch('subsec')))")
                if "state_seq" not in {row[1] for row in db.execute("PRAGMA table_info(checkpoints)")}:
                    # the seq of the last event the state holds; NULL: every event in ``events`` (older layout)
                    db.execute("ALTER TABLE checkpoints ADD COLUMN state_seq INTEGER")
                db.execute("CREATE TABLE IF NOT EXISTS checkpoint_events (run_id TEXT NOT NULL,"
                           " seq INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID")
        except (OSError, sqlite3.Error) as exc:
            raise CheckpointError(f"cannot open checkpoint store {self.path}: {exc}") from exc

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10)
        try:
            with db:
                yield db
        finally:
            db.close()

    def save(self, state: AgentState, events: list[Event]) -> None:
        try:
            with self._lock, self._connect() as db:
                row = db.execute("SELECT state_seq FROM checkpoints WHERE run_id = ?", (state.run_id,)).fetchone()
                older_layout = row is not None and row[0] is None
                held = 0 if row is None or older_layout else db.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM checkpoint_events WHERE run_id = ?", (state.run_id,)).fetchone()[0]
                if (events[-1].seq if events else 0) < held:
                    raise CheckpointError(f"cannot save run {state.run_id}: the file holds {held} events of it, "
                                          f"more than the {len(events)} given (another log of the same run id?)")
                if held and not _same_event(db, state.run_id, held, events):
                    # two loops of one run id (two workers resuming one pause): the longer log's tail
                    # appended to the other's beginning would be a history that never happened
                    raise CheckpointError(f"cannot save run {state.run_id}: its event {held} differs from the one "
                                          "the file holds (another log of the same run id?)")
                db.executemany("INSERT INTO checkpoint_events (run_id, seq, event) VALUES (?, ?, ?)",
                               [(state.run_id, e.seq, json.dumps(e.to_dict())) for e in events if e.seq > held])
                last = events[-1].seq if events else 0
                since = row[0] if row is not None and row[0] is not None else 0
                if row is None or older_layout or last - since >= max(_SNAPSHOT_EVERY, since):
                    db.execute("INSERT INTO checkpoints (run_id, state, events, state_seq) VALUES (?, ?, '[]', ?)"
                               " ON CONFLICT(run_id) DO UPDATE SET state=excluded.state, events='[]',"
                               " state_seq=excluded.state_seq, updated_at=unixepoch('subsec')",
                               (state.run_id, state.to_json(), last))
                else:
                    db.execute("UPDATE checkpoints SET updated_at=unixepoch('subsec') WHERE run_id = ?",
                               (state.run_id,))
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot save run {state.run_id}: {exc}") from exc

    def load(self, run_id: str) -> tuple[AgentState, list[Event]]:
        try:
            with self._connect() as db:
                row = db.execute("SELECT state, events, state_seq FROM checkpoints WHERE run_id = ?",
                                 (run_id,)).fetchone()
                rows = [] if row is None else db.execute(
                    "SELECT event FROM checkpoint_events WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot load run {run_id}: {exc}") from exc
        if row is None:
            raise CheckpointNotFoundError(run_id)
        state_json, older, since = row
        if since is None:  # the older layout: the whole log beside the state it made
            return AgentState.from_json(state_json), [Event.from_dict(e) for e in json.loads(older)]
        events = [Event.from_dict(json.loads(r[0])) for r in rows]
        state = AgentState.from_json(state_json)
        for event in events:
            if event.seq > since:
                state = apply(state, event)
        return state, events


def _same_event(db: sqlite3.Connection, run_id: str, seq: int, events: list[Event]) -> bool:
    """Whether the event ``seq`` of ``events`` is the one the file holds at ``seq``."""
    mine = next((e for e in events if e.seq == seq), None)
    row = db.execute("SELECT event FROM checkpoint_events WHERE run_id = ? AND seq = ?", (run_id, seq)).fetchone()
    return mine is not None and row is not None and json.loads(row[0]) == json.loads(json.dumps(mine.to_dict()))


_SNAPSHOT_EVERY = 32
"""Events between the first snapshots of a run's state (later ones come as the log doubles)."""


def _private_file(path: Path) -> None:
    """Create ``path`` 0600, or make the file there (ours, not a link) 0600 if it is more open."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _private_folders(folder: Path) -> None:
    """Make ``folder`` and its missing parents with mode 0700 (whatever the umask)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(mode=0o700, exist_ok=True)
        made.chmod(0o700)
