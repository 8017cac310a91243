"""What only the PostgreSQL store has: migrations, outages, recovery after a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from gateway.config import Config
from gateway.store import open_store
from gateway.store.base import ApprovalRecord, ApprovalStatus, ClaimStatus, StoreUnavailable, VoteStatus
from gateway.store.migrations import POSTGRES, Migration
from gateway.store.postgres import PostgresStore, apply_migrations
from tests.store._records import listed

pytestmark = pytest.mark.postgres

T0 = 1_800_000_000.0


def _versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def test_migrations_apply_once_and_are_idempotent(pg_dsn):
    assert apply_migrations(pg_dsn) == [m.version for m in POSTGRES]
    assert apply_migrations(pg_dsn) == []
    assert _versions(pg_dsn) == [m.version for m in POSTGRES]


def test_the_approvals_indexes_are_the_ones_their_queries_use(pg_dsn):
    """(tenant, status, created_at) was kept beside (tenant, status, created_at, approval_id),
    which begins with it: every insert and status change wrote both."""
    apply_migrations(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'approvals'")}
    assert "approvals_tenant_status" not in names
    assert {"approvals_tenant_status_created", "approvals_tenant_created", "approvals_tenant_request"} <= names


def test_replicas_starting_together_apply_each_migration_once(pg_dsn):
    slow = Migration(99, "slow test migration", ("SELECT pg_sleep(0.2)", "CREATE TABLE slow_marker (x int)"))
    with ThreadPoolExecutor(6) as pool:
        applied = list(pool.map(lambda _: apply_migrations(pg_dsn, (*POSTGRES, slow)), range(6)))
    flat = sorted(v for a in applied for v in a)
    assert flat == sorted([m.version for m in POSTGRES] + [99])
    assert _versions(pg_dsn) == [m.version for m in POSTGRES] + [99]


def test_a_new_migration_is_applied_on_the_next_start(pg_dsn):
    apply_migrations(pg_dsn)
    extra = Migration(1000, "add a column", ("ALTER TABLE claims ADD COLUMN note TEXT",))
    assert apply_migrations(pg_dsn, (*POSTGRES, extra)) == [1000]


def test_a_failing_migration_leaves_no_trace(pg_dsn):
    broken = Migration(1001, "broken", ("CREATE TABLE half (x int)", "THIS IS NOT SQL"))
    with pytest.raises(StoreUnavailable):
        apply_migrations(pg_dsn, (*POSTGRES, broken))
    assert 1001 not in _versions(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT to_regclass('half')").fetchone() == (None,)


async def test_approvals_stored_before_the_nul_migrations_survive_them(pg_dsn):
    assert apply_migrations(pg_dsn, POSTGRES[:3]) == [1, 2, 3]
    rec = ApprovalRecord(
        approval_id="old", status=ApprovalStatus.PENDING, tenant="acme", agent="demo-agent", user="dana",
        run_id="run-1", step=3, tool="write_file", tool_version="1", args_json='{"path":"a.txt"}',
        args_hash="sha256:abc", reasons=("writes need ops approval",), groups_any=("ops",), quorum=2,
        risk={"side_effect": "write"}, created_at=T0, expires_at=T0 + 900, decision_id="d-1",
        audience="toolgate-demo", updated_at=T0,
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # rows as the store wrote them before
        conn.execute(
            "INSERT INTO approvals(approval_id, status, tenant, created_at, record, changed_at) "
            "VALUES ('old', 'pending', 'acme', %s, %s::jsonb, %s)",
            (T0, json.dumps({**dataclasses.asdict(rec), "status": "pending"}), T0),
        )
        conn.execute("INSERT INTO approval_votes VALUES ('jti-1', 'old', 'alice', %s)", (T0,))
    assert apply_migrations(pg_dsn) == [m.version for m in POSTGRES[3:]]
    store = PostgresStore(pg_dsn)
    try:
        assert await store.get_approval("old") == rec
        assert (await store.add_approval_vote("old", "alice", "jti-1", T0)).status is VoteStatus.JTI_REUSED
        vote = await store.add_approval_vote("old", "bob", "jti-2", T0, key="bob-1#cc")
        assert vote.approvers == ("alice", "bob")
        assert vote.keys == (("alice", ""), ("bob", "bob-1#cc"))  # a vote made before keys were kept names none
        rejected = await store.transition_approval(
            "old", from_status=ApprovalStatus.PENDING, to_status=ApprovalStatus.REJECTED, now=T0 + 1, rejection_reason="no"
        )
        assert rejected == dataclasses.replace(
            rec, status=ApprovalStatus.REJECTED, rejection_reason="no", updated_at=T0 + 1
        )
        assert await listed(store) == [rejected]
    finally:
        await store.close()


def test_open_store_builds_the_postgres_store_from_config(pg_dsn, tmp_path):
    cfg = Config(data_dir=str(tmp_path), store={"kind": "postgres", "dsn": pg_dsn})
    store = open_store(cfg)
    assert isinstance(store, PostgresStore)
    asyncio.run(store.close())


def test_unreachable_database_fails_at_start_with_store_unavailable(pg_server):
    with pytest.raises(StoreUnavailable):
        PostgresStore(f"host=127.0.0.1 port={pg_server.port} user=toolgate dbname=no_such_db connect_timeout=2")


def test_empty_dsn_is_a_configuration_error():
    with pytest.raises(ValueError):
        PostgresStore("")


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://toolgate:pa%zz-s3cret@127.0.0.1:1/db",  # an un-encoded % in a URI password
        "host=127.0.0.1 port=1 password=pa s3cret",  # an unquoted space in a key=value password
        "postgresql://toolgate:pa s3cret@127.0.0.1:1/db",
    ],
    ids=["uri_percent", "keyword_space", "uri_space"],
)
@pytest.mark.parametrize("migrate", [True, False])
def test_a_malformed_dsn_is_refused_without_echoing_its_password(dsn, migrate):
    with pytest.raises((ValueError, StoreUnavailable)) as info:
        PostgresStore(dsn, migrate=migrate)
    shown = "".join(traceback.format_exception(info.value))  # what `toolgate serve` or a log would print
    assert "s3cret" not in shown


async def test_calls_fail_closed_while_the_server_is_down_and_recover_after(pg_server, pg_dsn):
    store = PostgresStore(pg_dsn, timeout=1.0)
    try:
        assert (await store.claim("grant", "before", "sha256:a", T0)).status is ClaimStatus.CLAIMED
        pg_server.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.claim("grant", "during", "sha256:a", T0)
        assert time.monotonic() - started < 5.0  # bounded by the store's timeout, not hanging
        pg_server.start()
        got = await _eventually(lambda: store.get_claim("grant", "before"))
        assert got is not None and got.status is ClaimStatus.RUNNING
        assert (await store.claim("grant", "after", "sha256:a", T0)).status is ClaimStatus.CLAIMED
    finally:
        await store.close()


async def test_pool_recovers_by_itself_after_a_restart(pg_server, pg_dsn):
    store = PostgresStore(pg_dsn, min_size=3, max_size=3, timeout=2.0)
    try:
        # fill the pool, so every pooled connection is cut by the restart
        await asyncio.gather(*(store.claim("grant", f"k{i}", "sha256:a", T0) for i in range(6)))
        pg_server.restart()
        results = await asyncio.gather(
            *(store.claim("grant", f"after{i}", "sha256:a", T0) for i in range(6)), return_exceptions=True
        )
        assert all(r.status is ClaimStatus.CLAIMED for r in results), results  # checked connections: no failure
    finally:
        await store.close()


async def _eventually(probe, timeout: float = 10.0):
    """Retry a store call until it stops raising StoreUnavailable (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await probe()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
