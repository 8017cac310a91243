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
from runtime_client._events import Event
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
    """One row per run in a SQLite file (WAL); survives process restarts.

    A checkpoint holds the run's goal, messages, tool outputs and approval ids, so the folders
    the store makes are 0700 and its file 0600 (SQLite gives the WAL files the file's mode);
    a folder that exists already is left as it is, a file made before (by an older version) is
    made 0600 too."""

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
        payload = json.dumps([e.to_dict() for e in events])
        try:
            with self._lock, self._connect() as db:
                db.execute("INSERT INTO checkpoints (run_id, state, events) VALUES (?, ?, ?)"
                           " ON CONFLICT(run_id) DO UPDATE SET state=excluded.state,"
                           " events=excluded.events, updated_at=unixepoch('subsec')",
                           (state.run_id, state.to_json(), payload))
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot save run {state.run_id}: {exc}") from exc

    def load(self, run_id: str) -> tuple[AgentState, list[Event]]:
        try:
            with self._connect() as db:
                row = db.execute("SELECT state, events FROM checkpoints WHERE run_id = ?",
                                 (run_id,)).fetchone()
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot load run {run_id}: {exc}") from exc
        if row is None:
            raise CheckpointNotFoundError(run_id)
        return AgentState.from_json(row[0]), [Event.from_dict(e) for e in json.loads(row[1])]


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
