"""The store contract runs on every store: ``make_store`` is parametrized over SQLite and PostgreSQL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests._postgres import pg_dsn, pg_server  # noqa: E402,F401  (fixtures)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def make_store(request, tmp_path):
    """Factory: stores of one kind over one shared database, as several replicas see it."""
    kind = request.param
    dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else ""
    opened = []

    def make(**kwargs):
        if kind == "sqlite":
            from gateway.store.sqlite import SQLiteStore

            s = SQLiteStore(tmp_path / "toolgate.db", **kwargs)
        else:
            from gateway.store.postgres import PostgresStore

            s = PostgresStore(dsn, **kwargs)
        opened.append(s)
        return s

    make.kind = kind
    make.dsn = dsn
    yield make
    for s in opened:
        await s.close()


@pytest.fixture
async def store(make_store):
    return make_store()
