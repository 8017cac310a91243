"""The pending count reads each pending request's expiry from its record. A record may hold any
text a request's fields held: NUL (``\\u0000`` in its JSON) or a lone surrogate (``\\udfff``) in a
reason or the arguments. PostgreSQL's JSON operators refuse both escapes when they read the
record, so a count that used them failed — the gauge left out of every scrape — while one such
request was pending; with the count's index, the request itself could not have been stored."""

from __future__ import annotations

import pytest

from gateway.approvals.malformed import MAX_TIME
from tests.store._records import T0, record


@pytest.mark.parametrize("text", ["a\x00b", "quota \udfff", "\\u0000 as written", "\U0001f600 \\\x00"])
async def test_a_request_holding_any_text_is_stored_and_counted(make_store, text):
    store = make_store()
    await store.create_approval(record("odd", reasons=(text,), args_json='{"note": %s}' % _json(text),
                                       expires_at=T0 + 600))
    await store.create_approval(record("plain", expires_at=T0 + 600))
    await store.create_approval(record("past", reasons=(text,), expires_at=T0 - 1))
    assert await store.count_pending_approvals(after=T0, until=MAX_TIME) == 2
    assert (await store.get_approval("odd")).reasons == (text,)


def _json(text: str) -> str:
    import json

    return json.dumps(text)


@pytest.mark.postgres
async def test_the_expiry_is_read_alike_whatever_standard_conforming_strings_says(pg_dsn):
    """The migration's function reads backslashes in its patterns as written even in a database
    that sets ``standard_conforming_strings = off`` (where ``'\\u'`` would be ``u``)."""
    import psycopg

    from gateway.store.postgres import PostgresStore

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET standard_conforming_strings = off')
    store = PostgresStore(pg_dsn)
    try:
        texts = ["a\x00b", "quota \udfff", "\\u0000 as written", "\\[x] \\\\u0000"]
        for n, text in enumerate(texts):
            await store.create_approval(record(f"odd-{n}", reasons=(text,), expires_at=T0 + 600))
        assert await store.count_pending_approvals(after=T0, until=MAX_TIME) == len(texts)
    finally:
        await store.close()
