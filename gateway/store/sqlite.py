"""SQLite store (WAL), the embedded default.

Calls run inline on the event loop: each is a few microseconds of local I/O with no await
inside, so a method is atomic within the process, and ``BEGIN IMMEDIATE`` makes it atomic
across processes sharing the file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Sequence

from gateway.store.base import BucketSpec, Claim, ClaimStatus, StoreUnavailable

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS claims (
        scope TEXT NOT NULL, key TEXT NOT NULL, args_hash TEXT NOT NULL,
        status TEXT NOT NULL, outcome TEXT, created REAL NOT NULL, finished REAL,
        PRIMARY KEY (scope, key))""",
    """CREATE TABLE IF NOT EXISTS rate_buckets (
        key TEXT PRIMARY KEY, tokens REAL NOT NULL, updated REAL NOT NULL)""",
]


class SQLiteStore:
    def __init__(self, path: str | Path, *, timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            for stmt in SCHEMA:
                self._db.execute(stmt)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc

    @property
    def db(self) -> sqlite3.Connection:
        return self._db

    def add_schema(self, statements: list[str]) -> None:
        """Let a feature (approvals, rate limits) create its tables."""
        for stmt in statements:
            self._db.execute(stmt)

    async def claim(self, scope: str, key: str, args_hash: str, now: float) -> Claim:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT status, args_hash, outcome FROM claims WHERE scope=? AND key=?", (scope, key)
                ).fetchone()
                if row is None:
                    self._db.execute(
                        "INSERT INTO claims(scope, key, args_hash, status, created) VALUES (?,?,?,?,?)",
                        (scope, key, args_hash, "running", now),
                    )
                    self._db.execute("COMMIT")
                    return Claim(ClaimStatus.CLAIMED, args_hash)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(str(exc)) from exc
        return _claim_from_row(row)

    async def get_claim(self, scope: str, key: str) -> Claim | None:
        try:
            row = self._db.execute(
                "SELECT status, args_hash, outcome FROM claims WHERE scope=? AND key=?", (scope, key)
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(str(exc)) from exc
        return None if row is None else _claim_from_row(row)

    async def complete(self, scope: str, key: str, outcome_json: str, now: float) -> None:
        try:
            self._db.execute(
                "UPDATE claims SET status='done', outcome=?, finished=? WHERE scope=? AND key=?",
                (outcome_json, now, scope, key),
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def release(self, scope: str, key: str) -> None:
        try:
            self._db.execute("DELETE FROM claims WHERE scope=? AND key=? AND status='running'", (scope, key))
        except sqlite3.Error as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def take_tokens(self, buckets: Sequence[BucketSpec], now: float) -> float:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                wait = self._take_tokens(buckets, now)
                self._db.execute("COMMIT" if wait == 0.0 else "ROLLBACK")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(str(exc)) from exc
        return wait

    def _take_tokens(self, buckets: Sequence[BucketSpec], now: float) -> float:
        wait = 0.0
        for b in buckets:
            row = self._db.execute("SELECT tokens, updated FROM rate_buckets WHERE key=?", (b.key,)).fetchone()
            tokens = b.capacity if row is None else min(b.capacity, row[0] + max(0.0, now - row[1]) * b.per_second)
            if tokens < 1.0 - 1e-9:
                wait = max(wait, (1.0 - tokens) / b.per_second)
            self._db.execute(
                "INSERT INTO rate_buckets(key, tokens, updated) VALUES (?,?,?) "
                "ON CONFLICT(key) DO UPDATE SET tokens=excluded.tokens, updated=excluded.updated",
                (b.key, max(tokens - 1.0, 0.0), max(now, row[1]) if row else now),
            )
        return wait

    async def close(self) -> None:
        self._db.close()


def _claim_from_row(row: tuple[str, str, str | None]) -> Claim:
    status, args_hash, outcome = row
    return Claim(ClaimStatus.DONE if status == "done" else ClaimStatus.RUNNING, args_hash, outcome)
