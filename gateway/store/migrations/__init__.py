"""Schema migrations for the PostgreSQL store, applied in order at start-up.

A migration is a version, a name and its statements; it runs in one transaction together
with its row in ``schema_migrations``. Add new ones at the end, never edit an applied one.
Times are ``DOUBLE PRECISION`` seconds since the epoch (the ``now`` the callers pass).

PostgreSQL text cannot hold the character NUL, nor can jsonb hold the escape ``\\u0000``; SQLite
stores both. So what may hold any string is kept where NUL fits: JSON as ``json`` (the text as
given, escapes and all), an id compared only for equality as its UTF-8 bytes (``bytea``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


PENDING_EXPIRY = "toolgate_pending_expiry(record)"
"""A request's expiry as its record has it, when that is a number (numeric: a damaged 1e400 is one
that float8 refuses), else NULL: migration 9 indexes it for pending requests, and the pending count
(``gateway.store.postgres.PENDING_COUNT``) says it the same way, so the index serves it."""

_EXPIRY_FUNCTION = r"""CREATE OR REPLACE FUNCTION toolgate_pending_expiry(doc json) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    r json := doc;
BEGIN
    -- PostgreSQL's JSON operators refuse the escapes \u0000 and a lone surrogate anywhere in the
    -- document they read, and a request's reasons or arguments may hold them: those escapes are
    -- left out of the text read here (every backslash begins an escape, so the pattern, matching
    -- left to right, pairs them as a JSON reader does); nothing else changes, the expiry least.
    -- (E'' strings: the same backslashes whatever standard_conforming_strings says)
    IF strpos(doc::text, E'\\u') > 0 THEN
        r := regexp_replace(doc::text, E'(\\\\[^u])|\\\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})', E'\\1', 'g')::json;
    END IF;
    IF json_typeof(r -> 'expires_at') = 'number' THEN
        RETURN (r ->> 'expires_at')::numeric;
    END IF;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;  -- an expiry that cannot be read is none: the request is not counted as pending
END
$fn$"""


POSTGRES: tuple[Migration, ...] = (
    Migration(
        1,
        "claims and rate buckets",
        (
            """CREATE TABLE IF NOT EXISTS claims (
                scope TEXT NOT NULL, key TEXT NOT NULL, args_hash TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('running', 'done')), outcome TEXT,
                created DOUBLE PRECISION NOT NULL, finished DOUBLE PRECISION,
                PRIMARY KEY (scope, key))""",
            """CREATE TABLE IF NOT EXISTS rate_buckets (
                key TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL,
                updated DOUBLE PRECISION NOT NULL)""",
        ),
    ),
    Migration(
        2,
        "approvals and approval votes",
        (
            """CREATE TABLE IF NOT EXISTS approvals (
                approval_id TEXT PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL, record JSONB NOT NULL)""",
            "CREATE INDEX IF NOT EXISTS approvals_tenant_status ON approvals(tenant, status, created_at)",
            """CREATE TABLE IF NOT EXISTS approval_votes (
                jti TEXT PRIMARY KEY, approval_id TEXT NOT NULL, approver TEXT NOT NULL,
                created DOUBLE PRECISION NOT NULL)""",
            "CREATE INDEX IF NOT EXISTS approval_votes_approval ON approval_votes(approval_id)",
        ),
    ),
    Migration(
        3,
        "approvals stamped with the database's clock on every change (Approvals.Watch reads what changed)",
        (
            "ALTER TABLE approvals ADD COLUMN IF NOT EXISTS changed_at DOUBLE PRECISION NOT NULL DEFAULT 0",
            "UPDATE approvals SET changed_at = created_at",
            "CREATE INDEX IF NOT EXISTS approvals_tenant_changed ON approvals(tenant, changed_at)",
        ),
    ),
    Migration(
        4,
        "approval records as json: jsonb refuses the escape \\u0000 (a NUL in a policy's or an approver's reason)",
        ("ALTER TABLE approvals ALTER COLUMN record TYPE json USING record::json",),
    ),
    Migration(
        5,
        "approval token ids as their UTF-8 bytes: text refuses NUL, and a signed jti may hold one",
        ("ALTER TABLE approval_votes ALTER COLUMN jti TYPE bytea USING convert_to(jti, 'UTF8')",),
    ),
    Migration(
        6,
        "approval requests indexed by their request key: an agent asking again for one call finds its pending "
        "request by index, not by reading every pending request of its tenant (rows made before have none)",
        ("ALTER TABLE approvals ADD COLUMN IF NOT EXISTS request_key TEXT",
         "CREATE INDEX IF NOT EXISTS approvals_tenant_request ON approvals(tenant, request_key)"),
    ),
    Migration(
        7,
        "approval requests indexed in the order they are listed, page by page: a tenant's newest first",
        ("CREATE INDEX IF NOT EXISTS approvals_tenant_created ON approvals(tenant, created_at, approval_id)",
         "CREATE INDEX IF NOT EXISTS approvals_tenant_status_created ON approvals(tenant, status, created_at, approval_id)"),
    ),
    Migration(
        8,
        "the (tenant, status, created_at) index dropped: approvals_tenant_status_created begins with it and serves "
        "every query it did, and each insert and status change kept both",
        ("DROP INDEX IF EXISTS approvals_tenant_status",),
    ),
    Migration(
        9,
        "pending approval requests indexed by their expiry: the pending-requests gauge counted them by reading "
        "every pending record, arguments and all (seconds at a thousand large requests, past a scrape's timeout)",
        (_EXPIRY_FUNCTION,
         f"CREATE INDEX IF NOT EXISTS approvals_pending_expiry ON approvals (({PENDING_EXPIRY})) WHERE status = 'pending'"),
    ),
    Migration(
        10,
        "each approval vote names the key that signed it: a vote counts only while its approver still holds that "
        "key, so a key removed from the keyring takes its votes with it (votes made before name none: not counted)",
        ("ALTER TABLE approval_votes ADD COLUMN IF NOT EXISTS approver_key TEXT NOT NULL DEFAULT ''",),
    ),
)
