"""SQLite store (WAL), the embedded default.

Calls run inline on the event loop: each is a few microseconds of local I/O, and a method's
statements run with no await between them, so a method is atomic within the process, and
``BEGIN IMMEDIATE`` (or a single statement) makes it atomic across processes sharing the file.

Lock waits never block the event loop. Another process (a second worker) may hold the write
lock for the few microseconds of its own write; SQLite's own busy handler would then sleep
*inside* the call — 1 ms first, holding up every call on this worker's loop (measured with two
workers: ~10 % of the time idle in those sleeps). So the connection has no busy timeout, and
a statement that finds the database locked is retried from the start after yielding to the
loop (next turn, then 0.1 ms doubling to 1 ms: a longer step overshoots a short lock), until
``timeout`` seconds have passed; nothing has run when SQLite reports the lock, so a retry
cannot apply anything twice.

WAL checkpoints run off the loop too, in a thread of their own (``gateway.store._checkpoint``).

Approval rows are read as bytes (``_ROW``) and loaded by ``gateway.store._records``, so a damaged
row (text that is not UTF-8, JSON that is no record) is loaded marked instead of failing the read.
A record is written as UTF-8 JSON; one holding text that is not UTF-8 (a damaged row read back,
its lone surrogates) is written with JSON escapes for all that is not ASCII (``_dump_json``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Sequence

import structlog

from gateway.audit_file import PRIVATE_DIR, PRIVATE_FILE
from gateway.store._checkpoint import WalCheckpointer
from gateway.store._pages import SQLITE_ORDER, SQLITE_SORT_KEY, Listed, page_where, sqlite_after, sqlite_cursor
from gateway.store._records import changed_record, load_row, transition_changes
from gateway.store.base import (
    RECENT_SECONDS,
    ApprovalRecord,
    ApprovalStatus,
    BucketSpec,
    Claim,
    ClaimStatus,
    StoreUnavailable,
    Vote,
    VoteStatus,
    record_fields,
    record_request_key,
)

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS claims (
        scope TEXT NOT NULL, key TEXT NOT NULL, args_hash TEXT NOT NULL,
        status TEXT NOT NULL, outcome TEXT, created REAL NOT NULL, finished REAL,
        PRIMARY KEY (scope, key))""",
    """CREATE TABLE IF NOT EXISTS rate_buckets (
        key TEXT PRIMARY KEY, tokens REAL NOT NULL, updated REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS approvals (
        approval_id TEXT PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL, created_at REAL NOT NULL,
        record TEXT NOT NULL, changed_at REAL NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS approvals_tenant_status ON approvals(tenant, status, created_at)",
    """CREATE TABLE IF NOT EXISTS approval_votes (
        jti TEXT PRIMARY KEY, approval_id TEXT NOT NULL, approver TEXT NOT NULL, created REAL NOT NULL,
        approver_key TEXT NOT NULL DEFAULT '')""",
    # a vote reads its request's votes (twice): without it, every vote ever cast, on every vote
    "CREATE INDEX IF NOT EXISTS approval_votes_approval ON approval_votes(approval_id, created)",
]


log = structlog.get_logger("toolgate.store")

_ROW = ("CAST(record AS BLOB), CAST(approval_id AS BLOB), CAST(status AS BLOB), CAST(tenant AS BLOB), "
        "CASE WHEN typeof(created_at) IN ('integer', 'real') THEN created_at END")
"""An approval row as ``load_row`` takes it: its text as bytes (SQLite's own decoding fails the whole
read on a byte that is not UTF-8), its ``created_at`` when it is a number."""

_EXPIRY = "(CASE WHEN json_valid(record) THEN json_extract(record, '$.expires_at') END)"
"""A request's expiry as its record has it (NULL when the record is no JSON): indexed for pending
requests (``approvals_pending_expiry``), and said the same way by the query it serves."""

PENDING_COUNT = f"SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND {_EXPIRY} > ? AND {_EXPIRY} <= ?"
"""Pending requests expiring in (after, until], by approvals_pending_expiry (its expression and
literal status said the same way). An expiry that is text never counts (SQLite orders every number
before every text, so text is never <= until), nor does NULL (a record that is no JSON)."""

_LOCKED = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_FIRST_BACKOFF, _MAX_BACKOFF = 0.0001, 0.001


class SQLiteStore:
    def __init__(self, path: str | Path, *, timeout: float = 5.0, wal_restart_frames: int = 4000) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE))  # sqlite would make it 0644; -wal and -shm follow its mode
        self._timeout = timeout
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            for stmt in SCHEMA:
                self._db.execute(stmt)
            self._migrate()
            self._db.execute("PRAGMA busy_timeout=0")  # from here on, lock waits are ours (see above)
            self._db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run off the loop (_checkpoint)
            self._checkpointer = WalCheckpointer(self.path, restart_frames=wal_restart_frames)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        """Bring a file made by an earlier version up to this schema (workers may race here:
        the check and the change run in one write transaction)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(approvals)")}
            if "changed_at" not in columns:
                self._db.execute("ALTER TABLE approvals ADD COLUMN changed_at REAL NOT NULL DEFAULT 0")
                self._db.execute("UPDATE approvals SET changed_at = created_at")
            self._db.execute("CREATE INDEX IF NOT EXISTS approvals_tenant_changed ON approvals(tenant, changed_at)")
            if "request_key" not in columns:  # rows made before it have none: never found as a duplicate
                self._db.execute("ALTER TABLE approvals ADD COLUMN request_key TEXT")
            if "approver_key" not in {row[1] for row in self._db.execute("PRAGMA table_info(approval_votes)")}:
                # votes made before it name no key: none counts (an approver votes again)
                self._db.execute("ALTER TABLE approval_votes ADD COLUMN approver_key TEXT NOT NULL DEFAULT ''")
            self._db.execute("CREATE INDEX IF NOT EXISTS approvals_tenant_request ON approvals(tenant, request_key)")
            # pages, newest first (approvals_tenant_status serves a status's; an index ends in the rowid)
            self._db.execute("CREATE INDEX IF NOT EXISTS approvals_tenant_created ON approvals(tenant, created_at)")
            # the pending count's (``_count_pending``): it read every pending record, arguments and all
            self._db.execute(f"CREATE INDEX IF NOT EXISTS approvals_pending_expiry ON approvals({_EXPIRY}) "
                             "WHERE status = 'pending'")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    @property
    def db(self) -> sqlite3.Connection:
        return self._db

    def add_schema(self, statements: list[str]) -> None:
        """Let a feature (approvals, rate limits) create its tables (at start-up: SQLite may wait)."""
        self._db.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        try:
            for stmt in statements:
                self._db.execute(stmt)
        finally:
            self._db.execute("PRAGMA busy_timeout=0")

    async def claim(self, scope: str, key: str, args_hash: str, now: float) -> Claim:
        # One autocommit INSERT is atomic within and across processes: the row's primary
        # key decides who claimed first. Only a loser reads the row it lost to.
        def attempt() -> Claim:
            won = self._db.execute(
                "INSERT INTO claims(scope, key, args_hash, status, created) VALUES (?,?,?,'running',?) "
                "ON CONFLICT(scope, key) DO NOTHING",
                (scope, key, args_hash, now),
            ).rowcount
            if won == 1:
                return Claim(ClaimStatus.CLAIMED, args_hash)
            row = self._db.execute(
                "SELECT status, args_hash, outcome, created FROM claims WHERE scope=? AND key=?", (scope, key)
            ).fetchone()
            if row is None:  # released between our INSERT and SELECT: the caller's wait loop retries
                return Claim(ClaimStatus.RUNNING, args_hash)
            return _claim_from_row(row)

        return await self._run(attempt)

    async def get_claim(self, scope: str, key: str) -> Claim | None:
        row = await self._run(lambda: self._db.execute(
            "SELECT status, args_hash, outcome, created FROM claims WHERE scope=? AND key=?", (scope, key)
        ).fetchone())
        return None if row is None else _claim_from_row(row)

    async def complete(self, scope: str, key: str, outcome_json: str, now: float) -> None:
        await self._run(lambda: self._db.execute(
            "UPDATE claims SET status='done', outcome=?, finished=? WHERE scope=? AND key=? AND status='running'",
            (outcome_json, now, scope, key),
        ))

    async def release(self, scope: str, key: str) -> None:
        await self._run(lambda: self._db.execute(
            "DELETE FROM claims WHERE scope=? AND key=? AND status='running'", (scope, key)
        ))

    async def abandon(self, scope: str, key: str, claimed_before: float, outcome_json: str, now: float) -> bool:
        return await self._run(lambda: self._db.execute(
            "UPDATE claims SET status='done', outcome=?, finished=? "
            "WHERE scope=? AND key=? AND status='running' AND created < ?",
            (outcome_json, now, scope, key, claimed_before),
        ).rowcount == 1)

    async def prune_claims(self, finished_before: float, *, batch: int = 500) -> int:
        # Claims are inserted in time order, so rowid order is age order: walk from the
        # oldest in batches (no index on ``finished`` to keep up on every call), deleting the
        # finished ones, until a claim created after the cutoff. The loop gets a turn
        # between batches, so a large sweep never holds it for long.
        deleted, after = 0, 0
        while True:
            def step() -> tuple[int, int, bool]:
                rows = self._db.execute(
                    "SELECT rowid, status, finished, created FROM claims WHERE rowid > ? ORDER BY rowid LIMIT ?",
                    (after, batch),
                ).fetchall()
                old = [r[0] for r in rows if r[1] == "done" and r[2] is not None and r[2] < finished_before]
                if old:
                    self._db.execute(f"DELETE FROM claims WHERE rowid IN ({','.join('?' * len(old))})", old)
                more = len(rows) == batch and rows[-1][3] < finished_before
                return len(old), (rows[-1][0] if rows else after), more

            n, after, more = await self._run(step)
            deleted += n
            if not more:
                return deleted
            await asyncio.sleep(0)

    async def take_tokens(self, buckets: Sequence[BucketSpec], now: float) -> float:
        def step() -> tuple[bool, float]:
            wait = self._take_tokens(buckets, now)
            return wait == 0.0, wait

        return await self._atomic(step)

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

    # -- approvals ----------------------------------------------------------------------

    async def create_approval(self, record: ApprovalRecord) -> None:
        row = (record.approval_id, str(record.status), record.tenant, record.created_at, _dump(record),
               record_request_key(record))
        await self._run(lambda: self._db.execute(  # stamped on each attempt: a lock wait cannot age it
            "INSERT INTO approvals(approval_id, status, tenant, created_at, record, request_key, changed_at) "
            "VALUES (?,?,?,?,?,?,?)",
            (*row, time.time()),
        ))

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        row = await self._run(lambda: self._db.execute(
            f"SELECT {_ROW} FROM approvals WHERE approval_id=?", (approval_id,)).fetchone())
        return None if row is None else load_row(*row)

    async def approvals_page(self, *, tenant: str, status: str = "", limit: int = 100, after: str = "") -> list[Listed]:
        where, params = page_where(tenant, status, after, mark="?", parse=sqlite_after)
        sql = f"SELECT {_ROW}, {SQLITE_SORT_KEY} FROM approvals WHERE {where} {SQLITE_ORDER} LIMIT ?"
        rows = await self._run(lambda: self._db.execute(sql, (*params, limit)).fetchall())
        return [(load_row(*r[:5]), sqlite_cursor(*r[5:8])) for r in rows]

    async def count_pending_approvals(self, *, after: float, until: float) -> int:
        """Counted from an index (``PENDING_COUNT``), in a thread on a connection of its own: it
        read every pending request's record once, and on the loop a scrape held every call for
        seconds at thousands of large requests; off the loop still, however long the index is."""
        return await asyncio.to_thread(self._count_pending, after, until)

    def _count_pending(self, after: float, until: float) -> int:
        try:
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            try:
                db.execute("PRAGMA query_only=1")
                row = db.execute(PENDING_COUNT, (after, until)).fetchone()
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot count pending approvals in {self.path}: {exc}") from exc
        return int(row[0])

    async def pending_approvals(self, *, tenant: str, request_key: str, limit: int = 5) -> list[ApprovalRecord]:
        rows = await self._run(lambda: self._db.execute(
            # INDEXED BY: the planner took (tenant, status) for the ORDER BY and read every pending
            # request, arguments and all, to reach its request_key
            f"SELECT {_ROW} FROM approvals INDEXED BY approvals_tenant_request "
            "WHERE tenant=? AND request_key=? AND status=? ORDER BY created_at DESC "
            "LIMIT ?", (tenant, request_key, str(ApprovalStatus.PENDING), limit)).fetchall())
        return [load_row(*r) for r in rows]

    async def changed_approvals(
        self, *, tenant: str, since: float | None, limit: int = 500
    ) -> tuple[list[ApprovalRecord], float]:
        def read() -> tuple[list[Any], float]:
            now = time.time()  # the host's clock, which every worker on this file shares
            rows = self._db.execute(
                f"SELECT {_ROW}, changed_at FROM approvals WHERE tenant=? AND changed_at>=? "
                "ORDER BY changed_at LIMIT ?",
                (tenant, now - RECENT_SECONDS if since is None else since, limit)).fetchall()
            return rows, now

        rows, now = await self._run(read)
        return [load_row(*r[:5]) for r in rows], (rows[-1][5] if len(rows) >= limit else now - RECENT_SECONDS)

    async def add_approval_vote(self, approval_id: str, approver: str, jti: str, now: float, key: str = "") -> Vote:
        return await self._atomic(lambda: self._vote(approval_id, approver, jti, now, key))

    def _vote(self, approval_id: str, approver: str, jti: str, now: float, key: str) -> tuple[bool, Vote]:
        row = self._db.execute("SELECT status FROM approvals WHERE approval_id=?", (approval_id,)).fetchone()
        if row is None or row[0] != ApprovalStatus.PENDING:
            return False, self._votes(VoteStatus.NOT_FOUND if row is None else VoteStatus.NOT_PENDING, approval_id)
        if self._db.execute("SELECT 1 FROM approval_votes WHERE jti=?", (jti,)).fetchone():
            return False, self._votes(VoteStatus.JTI_REUSED, approval_id)
        before = self._votes(VoteStatus.ADDED, approval_id).approvers
        self._db.execute("INSERT INTO approval_votes(jti, approval_id, approver, created, approver_key) "
                         "VALUES (?,?,?,?,?)", (jti, approval_id, approver, now, key))
        return True, self._votes(VoteStatus.SAME_APPROVER if approver in before else VoteStatus.ADDED, approval_id)

    def _votes(self, status: VoteStatus, approval_id: str) -> Vote:
        return Vote(status, tuple((a, k) for a, k in self._db.execute(
            "SELECT approver, approver_key FROM approval_votes WHERE approval_id=? ORDER BY created, approver, rowid",
            (approval_id,))))

    async def transition_approval(
        self, approval_id: str, *, from_status: ApprovalStatus, to_status: ApprovalStatus, now: float,
        approvers: tuple[str, ...] | None = None, grant: str = "", grant_jti: str = "", rejection_reason: str = "",
    ) -> ApprovalRecord | None:
        changes = transition_changes(to_status, now, approvers, grant=grant, grant_jti=grant_jti,
                                     rejection_reason=rejection_reason)

        def step() -> tuple[bool, ApprovalRecord | None]:
            row = self._db.execute(f"SELECT {_ROW} FROM approvals WHERE approval_id=?", (approval_id,)).fetchone()
            if row is None or load_row(*row).status != from_status:
                return False, None
            stored, row_id, _, tenant, created_at = row
            new = changed_record(stored, changes)
            if new is None:  # no JSON object to change (a damaged row): the status column alone
                self._db.execute("UPDATE approvals SET status=?, changed_at=? WHERE approval_id=?",
                                 (str(to_status), time.time(), approval_id))
            else:
                stored = _dump_json(new)
                self._db.execute("UPDATE approvals SET status=?, record=?, changed_at=? WHERE approval_id=?",
                                 (str(to_status), stored, time.time(), approval_id))
            return True, load_row(stored, row_id, str(to_status), tenant, created_at)

        return await self._atomic(step)

    async def _atomic(self, step: Any) -> Any:
        """Run ``step() -> (commit, value)`` inside BEGIN IMMEDIATE (retried whole while locked)."""
        def transaction() -> Any:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                commit, value = step()
                self._db.execute("COMMIT" if commit else "ROLLBACK")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            return value

        return await self._run(transaction)

    async def _run(self, fn: Any) -> Any:
        """``fn()``, retried while another connection holds the lock (see the module docstring)."""
        deadline, delay = 0.0, 0.0
        while True:
            try:
                value = fn()
                if self._checkpointer.restart_due:
                    self._restart_wal()
                return value
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", None) not in _LOCKED:
                    raise StoreUnavailable(str(exc)) from exc
                now = time.monotonic()
                deadline = deadline or now + self._timeout
                if now >= deadline:
                    raise StoreUnavailable(f"{exc} (waited {self._timeout:g} s for the lock)") from exc
            except sqlite3.Error as exc:
                raise StoreUnavailable(str(exc)) from exc
            await asyncio.sleep(delay)  # other calls go on meanwhile
            delay = min(delay * 2 or _FIRST_BACKOFF, _MAX_BACKOFF)

    def _restart_wal(self) -> None:
        """The RESTART checkpoint the checkpointer asked for (see gateway.store._checkpoint).

        With no busy timeout it never waits: if another process holds the write lock or is
        reading the WAL, it returns at once and the checkpointer asks again."""
        self._checkpointer.restart_due = False
        try:
            self._db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except sqlite3.Error as exc:  # the write before it has succeeded; the next request retries
            log.warning("wal_restart_failed", error=str(exc)[:200])

    async def close(self) -> None:
        self._checkpointer.stop()
        self._db.close()


def _claim_from_row(row: tuple[str, str, str | None, float]) -> Claim:
    status, args_hash, outcome, created = row
    return Claim(ClaimStatus.DONE if status == "done" else ClaimStatus.RUNNING, args_hash, outcome, created)


def _dump(record: ApprovalRecord) -> str:
    return _dump_json(record_fields(record))


def _dump_json(raw: dict[str, Any]) -> str:
    """``raw`` as compact JSON in UTF-8; when it holds text that is not (lone surrogates, as a
    damaged row reads back), with all that is not ASCII escaped: the same JSON, read back alike."""
    text = json.dumps(raw, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        return json.dumps(raw, separators=(",", ":"))
    return text

