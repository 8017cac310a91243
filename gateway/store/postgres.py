"""PostgreSQL store: several gateway replicas share one database.

Same protocol and semantics as the SQLite store (``gateway.store.base``):

- ``claim``: ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` — exactly one caller, on any
  replica, gets ``claimed``; the others read the existing row.
- ``complete`` / ``release``: compare-and-set on ``status = 'running'``, so a finished claim
  is never overwritten or dropped.
- A caller cancelled while PostgreSQL answers (its client went away) may never hear that a
  statement committed. So claim writes run to their end whatever happens to the caller
  (``_to_the_end``), and a claim taken for a caller that is gone is given back (``_give_back``):
  left ``running`` by nobody, it kept every retry under its key waiting, then told
  ``outcome_unknown`` for a tool that never ran.
- ``take_tokens``: one transaction that locks every bucket row (in key order, so two
  replicas cannot deadlock), then takes a token from each or from none.
- ``transition_approval``: one transaction that locks the row while it is ``from_status``,
  then writes the merged record (``json`` has no merge operator, see below).

Approval rows are read as text (``record::text``, not parsed by the driver) and loaded by
``gateway.store._records``, so a damaged row (JSON that is no record, or nested too deep to
parse) is loaded marked instead of failing the read. A merged record that ``json`` cannot hold
(an infinite number read from ``1e400``) leaves the record as it was: the status column changes.

NUL: an approval's record is ``json`` (the text as given: jsonb refuses the escape
``\\u0000``) and a vote's jti is ``bytea`` (text refuses NUL), so both hold any string, as on
SQLite. Approval ids never hold NUL (the service makes them): a lookup by one that does, an
id a caller sent, finds nothing, as on SQLite, instead of failing.

Start-up applies the schema migrations (``gateway.store.migrations``) under a session
advisory lock, so replicas starting together apply each migration once. The constructor is
synchronous (it runs while the app is built) and raises ``StoreUnavailable`` when the
database cannot be reached, so the gateway does not start without its store.

Errors: every ``psycopg`` error (connection refused, connection cut by a restart, pool
timeout) is translated at one boundary, ``_connection``, into ``StoreUnavailable``; the
pipeline turns that into an audited refusal (fail closed). Connections are checked when
taken from the pool and broken ones replaced, so after a PostgreSQL restart the store
recovers by itself; while the server is down a call waits at most ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Json
from psycopg_pool import AsyncConnectionPool

from gateway.store._pages import POSTGRES_ORDER, Listed, page_where, postgres_after, postgres_cursor
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
from gateway.store.migrations import PENDING_EXPIRY, POSTGRES, Migration

log = structlog.get_logger("toolgate.store.postgres")

_DB_NOW = "extract(epoch from clock_timestamp())::double precision"
"""The database server's clock, which stamps approval changes (``changed_approvals``)."""
_NUL = "\x00"
_ROW = "record::text, approval_id, status, tenant, created_at"
"""An approval row as ``load_row`` takes it: the record's JSON as stored, unparsed."""
PENDING_COUNT = (f"SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND {PENDING_EXPIRY} > %s::numeric "
                 f"AND {PENDING_EXPIRY} <= %s::numeric")
"""Pending requests expiring in (after, until]: by migration 9's index, whose expression and
literal status it says the same way."""

MIGRATION_LOCK = 0x746F6F6C67617465  # "toolgate": the advisory lock key for migrations
_CLAIM_RETRIES = 5


class PostgresStore:
    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        """Apply migrations (unless ``migrate=False``) and prepare the pool (opened on first use).

        ``timeout``: seconds a call waits for a healthy connection before ``StoreUnavailable``.
        Raises ``ValueError`` for an empty or malformed ``dsn`` (without repeating it).
        """
        if not dsn:
            raise ValueError("store.kind postgres needs store.dsn")
        _check_dsn(dsn)
        if not 0 < min_size <= max_size:
            raise ValueError("need 0 < min_size <= max_size")
        self.dsn = dsn
        if migrate:
            apply_migrations(dsn, connect_timeout=timeout)
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            check=AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True},
            reconnect_timeout=timeout * 12,
            name="toolgate-store",
        )
        self._opened = False
        self._open_lock = asyncio.Lock()
        self._unfinished: set[asyncio.Future[Any]] = set()
        """Claim writes whose caller went away, run to their end (``close`` waits for them)."""

    # -- claims ---------------------------------------------------------------------------

    async def claim(self, scope: str, key: str, args_hash: str, now: float) -> Claim:
        taking = self._to_the_end(self._claim(scope, key, args_hash, now))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(lambda done: self._give_back(done, scope, key))
            raise

    def _give_back(self, taking: asyncio.Future[Claim], scope: str, key: str) -> None:
        """Release the claim ``taking`` took for a caller that went away (nobody holds it)."""
        if taking.cancelled() or taking.exception() is not None or taking.result().status != ClaimStatus.CLAIMED:
            return
        log.info("claim_given_back", scope=scope[:64], reason="its caller went away before hearing it was taken")
        self._to_the_end(self._release(scope, key))

    def _to_the_end(self, write: Any) -> asyncio.Future[Any]:
        """``write`` as a task that runs to its end even if the caller awaiting it is cancelled."""
        task = asyncio.ensure_future(write)
        self._unfinished.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._unfinished.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:  # read here: its caller may be gone
            log.warning("claim_write_failed", error=type(exc).__name__)

    async def _claim(self, scope: str, key: str, args_hash: str, now: float) -> Claim:
        async with self._connection() as conn:
            for _ in range(_CLAIM_RETRIES):
                inserted = await (await conn.execute(
                    "INSERT INTO claims(scope, key, args_hash, status, created) VALUES (%s, %s, %s, 'running', %s) "
                    "ON CONFLICT (scope, key) DO NOTHING RETURNING args_hash",
                    (scope, key, args_hash, now),
                )).fetchone()
                if inserted is not None:
                    return Claim(ClaimStatus.CLAIMED, args_hash)
                row = await self._select_claim(conn, scope, key)
                if row is not None:  # else released between the two statements: try again
                    return row
        raise StoreUnavailable(f"claim {scope}/{key} kept changing under {_CLAIM_RETRIES} attempts")

    async def get_claim(self, scope: str, key: str) -> Claim | None:
        async with self._connection() as conn:
            return await self._select_claim(conn, scope, key)

    async def complete(self, scope: str, key: str, outcome_json: str, now: float) -> None:
        await asyncio.shield(self._to_the_end(self._complete(scope, key, outcome_json, now)))

    async def _complete(self, scope: str, key: str, outcome_json: str, now: float) -> None:
        async with self._connection() as conn:
            await conn.execute(
                "UPDATE claims SET status = 'done', outcome = %s, finished = %s "
                "WHERE scope = %s AND key = %s AND status = 'running'",
                (outcome_json, now, scope, key),
            )

    async def release(self, scope: str, key: str) -> None:
        await asyncio.shield(self._to_the_end(self._release(scope, key)))

    async def _release(self, scope: str, key: str) -> None:
        async with self._connection() as conn:
            await conn.execute(
                "DELETE FROM claims WHERE scope = %s AND key = %s AND status = 'running'", (scope, key)
            )

    async def abandon(self, scope: str, key: str, claimed_before: float, outcome_json: str, now: float) -> bool:
        async with self._connection() as conn:
            cur = await conn.execute(
                "UPDATE claims SET status = 'done', outcome = %s, finished = %s "
                "WHERE scope = %s AND key = %s AND status = 'running' AND created < %s",
                (outcome_json, now, scope, key, claimed_before),
            )
            return cur.rowcount == 1

    async def prune_claims(self, finished_before: float, *, batch: int = 1000) -> int:
        # In batches, each its own short transaction, so no sweep holds many row locks.
        deleted = 0
        while True:
            async with self._connection() as conn:
                cur = await conn.execute(
                    "DELETE FROM claims WHERE ctid = ANY(ARRAY(SELECT ctid FROM claims "
                    "WHERE status = 'done' AND finished < %s LIMIT %s))",
                    (finished_before, batch),
                )
                n = cur.rowcount
            deleted += n
            if n < batch:
                return deleted

    @staticmethod
    async def _select_claim(conn: psycopg.AsyncConnection[Any], scope: str, key: str) -> Claim | None:
        row = await (await conn.execute(
            "SELECT status, args_hash, outcome, created FROM claims WHERE scope = %s AND key = %s", (scope, key)
        )).fetchone()
        if row is None:
            return None
        status, stored_hash, outcome, created = row
        return Claim(ClaimStatus.DONE if status == "done" else ClaimStatus.RUNNING, stored_hash, outcome, created)

    # -- rate limits ----------------------------------------------------------------------

    async def take_tokens(self, buckets: Sequence[BucketSpec], now: float) -> float:
        if not buckets:
            return 0.0
        keys = sorted({b.key for b in buckets})
        async with self._connection() as conn:
            async with conn.transaction() as tx:
                # Missing rows start full; insert them first so every row can be locked.
                await conn.execute(
                    "INSERT INTO rate_buckets(key, tokens, updated) "
                    "SELECT k, c, %s FROM unnest(%s::text[], %s::float8[]) AS t(k, c) ON CONFLICT (key) DO NOTHING",
                    (now, keys, [_capacity(buckets, k) for k in keys]),
                )
                rows = await (await conn.execute(
                    "SELECT key, tokens, updated FROM rate_buckets WHERE key = ANY(%s) ORDER BY key FOR UPDATE",
                    (keys,),
                )).fetchall()
                state = {k: (tokens, updated) for k, tokens, updated in rows}
                wait = 0.0
                for b in buckets:  # in the caller's order, as SQLite does
                    stored, updated = state[b.key]
                    tokens = min(b.capacity, stored + max(0.0, now - updated) * b.per_second)
                    if tokens < 1.0 - 1e-9:
                        wait = max(wait, (1.0 - tokens) / b.per_second)
                    state[b.key] = (max(tokens - 1.0, 0.0), max(now, updated))
                if wait > 0.0:
                    tx.force_rollback = True  # none taken
                    return wait
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "UPDATE rate_buckets SET tokens = %s, updated = %s WHERE key = %s",
                        [(tokens, updated, k) for k, (tokens, updated) in state.items()],
                    )
        return 0.0

    # -- approvals ------------------------------------------------------------------------

    async def create_approval(self, record: ApprovalRecord) -> None:
        async with self._connection() as conn:
            await conn.execute(
                "INSERT INTO approvals(approval_id, status, tenant, created_at, record, request_key, changed_at) "
                f"VALUES (%s, %s, %s, %s, %s, %s, {_DB_NOW})",
                (record.approval_id, str(record.status), record.tenant, record.created_at, Json(_dump(record)),
                 record_request_key(record)),
            )

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        if _NUL in approval_id:
            return None
        async with self._connection() as conn:
            row = await (await conn.execute(
                f"SELECT {_ROW} FROM approvals WHERE approval_id = %s", (approval_id,)
            )).fetchone()
        return None if row is None else load_row(*row)

    async def approvals_page(self, *, tenant: str, status: str = "", limit: int = 100, after: str = "") -> list[Listed]:
        where, params = page_where(tenant, status, after, mark="%s", parse=postgres_after)
        if any(_NUL in p for p in params if isinstance(p, str)):
            return []
        async with self._connection() as conn:
            rows = await (await conn.execute(
                f"SELECT {_ROW} FROM approvals WHERE {where} {POSTGRES_ORDER} LIMIT %s", (*params, limit),
            )).fetchall()
        return [(load_row(*r), postgres_cursor(r[4], r[1])) for r in rows]

    async def count_pending_approvals(self, *, after: float, until: float) -> int:
        async with self._connection() as conn:
            row = await (await conn.execute(PENDING_COUNT, (after, until))).fetchone()
        return int(row[0])

    async def pending_approvals(self, *, tenant: str, request_key: str, limit: int = 5) -> list[ApprovalRecord]:
        if _NUL in tenant or _NUL in request_key:
            return []
        async with self._connection() as conn:
            rows = await (await conn.execute(
                f"SELECT {_ROW} FROM approvals WHERE tenant = %s AND request_key = %s AND status = %s "
                "ORDER BY created_at DESC LIMIT %s", (tenant, request_key, str(ApprovalStatus.PENDING), limit),
            )).fetchall()
        return [load_row(*r) for r in rows]

    async def changed_approvals(
        self, *, tenant: str, since: float | None, limit: int = 500
    ) -> tuple[list[ApprovalRecord], float]:
        async with self._connection() as conn:
            now = (await (await conn.execute(f"SELECT {_DB_NOW}")).fetchone())[0]  # the clock every replica shares
            rows = await (await conn.execute(
                f"SELECT {_ROW}, changed_at FROM approvals WHERE tenant = %s AND changed_at >= %s "
                "ORDER BY changed_at LIMIT %s",
                (tenant, now - RECENT_SECONDS if since is None else since, limit),
            )).fetchall()
        return [load_row(*r[:5]) for r in rows], (rows[-1][5] if len(rows) >= limit else now - RECENT_SECONDS)

    async def add_approval_vote(self, approval_id: str, approver: str, jti: str, now: float, key: str = "") -> Vote:
        if _NUL in approval_id:
            return Vote(VoteStatus.NOT_FOUND)
        async with self._connection() as conn, conn.transaction():
            # the row lock serializes votes on one request across replicas
            row = await (await conn.execute(
                "SELECT status FROM approvals WHERE approval_id = %s FOR UPDATE", (approval_id,)
            )).fetchone()
            before = await _votes(conn, VoteStatus.ADDED, approval_id)
            if row is None or row[0] != ApprovalStatus.PENDING:
                return dataclasses.replace(before, status=VoteStatus.NOT_FOUND if row is None else VoteStatus.NOT_PENDING)
            added = await (await conn.execute(
                "INSERT INTO approval_votes(jti, approval_id, approver, created, approver_key) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (jti) DO NOTHING RETURNING jti",
                (jti.encode(), approval_id, approver, now, key),
            )).fetchone()
            if added is None:
                return dataclasses.replace(before, status=VoteStatus.JTI_REUSED)
            status = VoteStatus.SAME_APPROVER if approver in before.approvers else VoteStatus.ADDED
            return await _votes(conn, status, approval_id)

    async def transition_approval(
        self, approval_id: str, *, from_status: ApprovalStatus, to_status: ApprovalStatus, now: float,
        approvers: tuple[str, ...] | None = None, grant: str = "", grant_jti: str = "", rejection_reason: str = "",
    ) -> ApprovalRecord | None:
        if _NUL in approval_id:
            return None
        changes = transition_changes(to_status, now, approvers, grant=grant, grant_jti=grant_jti,
                                     rejection_reason=rejection_reason)
        async with self._connection() as conn, conn.transaction():
            # a waiter for the lock re-checks the status once it has it: compare-and-set
            row = await (await conn.execute(
                f"SELECT {_ROW} FROM approvals WHERE approval_id = %s AND status = %s FOR UPDATE",
                (approval_id, str(from_status)),
            )).fetchone()
            if row is None:
                return None
            stored = _merged_json(changed_record(row[0], changes))
            if stored is None:  # no JSON object to change, or one json cannot hold: the status column alone
                await conn.execute(f"UPDATE approvals SET status = %s, changed_at = {_DB_NOW} WHERE approval_id = %s",
                                   (str(to_status), approval_id))
            else:
                await conn.execute(
                    f"UPDATE approvals SET status = %s, record = %s::json, changed_at = {_DB_NOW} "
                    "WHERE approval_id = %s",
                    (str(to_status), stored, approval_id),
                )
        return load_row(row[0] if stored is None else stored, row[1], str(to_status), *row[3:])

    # -- lifecycle ------------------------------------------------------------------------

    async def close(self) -> None:
        # claim writes for callers that went away land first (a claim given back while waiting adds
        # its release: waited for too), within the pool's timeout
        deadline = time.monotonic() + self._pool.timeout
        while self._unfinished and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(set(self._unfinished), timeout=left)
        if self._opened:
            await self._pool.close()
            self._opened = False

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A healthy pooled connection; any psycopg failure becomes ``StoreUnavailable``."""
        try:
            if not self._opened:
                await self._open()
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            log.warning("store_unavailable", error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
            raise StoreUnavailable(f"PostgreSQL store unavailable: {type(exc).__name__}") from exc

    async def _open(self) -> None:
        async with self._open_lock:
            if not self._opened:
                await self._pool.open(wait=False)
                self._opened = True


async def _votes(conn: psycopg.AsyncConnection[Any], status: VoteStatus, approval_id: str) -> Vote:
    rows = await (await conn.execute(
        "SELECT approver, approver_key FROM approval_votes WHERE approval_id = %s ORDER BY created, approver, jti",
        (approval_id,),
    )).fetchall()
    return Vote(status, tuple((a, k) for a, k in rows))


def _dump(record: ApprovalRecord) -> dict[str, Any]:
    raw = record_fields(record)
    raw["status"] = str(record.status)
    return raw


def _merged_json(merged: dict[str, Any] | None) -> str | None:
    """``merged`` as ``Json`` writes it (so a valid record is stored as ever); None when there is
    none, or it holds a number ``json`` cannot (NaN, infinite: a damaged row read back)."""
    try:
        return None if merged is None else json.dumps(merged, allow_nan=False)
    except ValueError:
        return None



def _capacity(buckets: Sequence[BucketSpec], key: str) -> float:
    return next(b.capacity for b in buckets if b.key == key)


def _check_dsn(dsn: str) -> None:
    """Raise ``ValueError`` when libpq cannot parse ``dsn``, without repeating any of it.

    libpq's own message quotes the token it choked on, which is often the password (an
    un-encoded ``%`` or space in it); the pool would log that message on every reconnect.
    """
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error:
        # no ``from exc``: the cause's message is the one that quotes the password
        raise ValueError(
            "store.dsn is not a valid PostgreSQL connection string (not shown: it may hold a password); "
            "percent-encode special characters of a URI, quote values with spaces in key=value form"
        ) from None


def apply_migrations(
    dsn: str, migrations: Sequence[Migration] = POSTGRES, *, connect_timeout: float = 5.0
) -> list[int]:
    """Apply the migrations not yet recorded in ``schema_migrations``; returns their versions.

    Idempotent, and safe when several replicas start at once: the whole check-and-apply runs
    under a session advisory lock, each migration in its own transaction with its record.
    """
    _check_dsn(dsn)
    applied: list[int] = []
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout))) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
                done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
                for m in sorted(migrations, key=lambda m: m.version):
                    if m.version in done:
                        continue
                    with conn.transaction():
                        for statement in m.statements:
                            conn.execute(statement)
                        conn.execute("INSERT INTO schema_migrations(version, name) VALUES (%s, %s)", (m.version, m.name))
                    applied.append(m.version)
                    log.info("store_migrated", version=m.version, name=m.name)
                newer = sorted(v for v in done if v > max((m.version for m in migrations), default=0))
                if newer:
                    log.warning("store_schema_newer", versions=newer)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot migrate the PostgreSQL store: {exc}") from exc
    return applied
