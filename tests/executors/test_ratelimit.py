import pytest

from gateway.codes import Code
from gateway.ratelimit import ConcurrencyLimiter, RateLimited, RateLimiter
from gateway.store.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path):
    s = SQLiteStore(tmp_path / "t.db")
    yield s
    await s.close()


async def test_n_plus_first_call_in_the_window_is_rate_limited_then_allowed_later(store, make_tool):
    tool = make_tool("search", rate_limit_per_minute=3)
    limiter = RateLimiter(store)
    t0 = 1000.0
    assert [await limiter.acquire("acme", tool, t0 + i) for i in range(3)] == [None, None, None]
    limited = await limiter.acquire("acme", tool, t0 + 3)
    assert isinstance(limited, RateLimited) and 0 < limited.retry_after <= 20
    assert await limiter.acquire("acme", tool, t0 + 3 + limited.retry_after) is None
    assert isinstance(await limiter.acquire("acme", tool, t0 + 3 + limited.retry_after), RateLimited)


async def test_tenants_do_not_share_a_tool_bucket(store, make_tool):
    tool = make_tool("search", rate_limit_per_minute=1)
    limiter = RateLimiter(store)
    assert await limiter.acquire("acme", tool, 0.0) is None
    assert isinstance(await limiter.acquire("acme", tool, 0.0), RateLimited)
    assert await limiter.acquire("globex", tool, 0.0) is None


async def test_tenant_bucket_spans_tools_and_a_refusal_spends_no_token(store, make_tool):
    a, b = make_tool("a", rate_limit_per_minute=2), make_tool("b", rate_limit_per_minute=60)
    limiter = RateLimiter(store, tenant_per_minute=2)
    assert await limiter.acquire("acme", a, 0.0) is None
    assert await limiter.acquire("acme", b, 0.0) is None
    assert isinstance(await limiter.acquire("acme", a, 0.0), RateLimited)  # tenant bucket empty
    # one tenant token back after 30 s; tool a still holds its second token: not spent by the refusal
    assert await limiter.acquire("acme", a, 30.0) is None


async def test_unlimited_tools_do_not_touch_the_store(store, make_tool):
    tool = make_tool("free")
    limiter = RateLimiter(store)
    for _ in range(100):
        assert await limiter.acquire("acme", tool, 0.0) is None
    assert store.db.execute("SELECT count(*) FROM rate_buckets").fetchone()[0] == 0


async def test_buckets_are_shared_by_stores_on_the_same_file(tmp_path, make_tool):
    tool = make_tool("search", rate_limit_per_minute=1)
    one, two = SQLiteStore(tmp_path / "s.db"), SQLiteStore(tmp_path / "s.db")
    try:
        assert await RateLimiter(one).acquire("acme", tool, 5.0) is None
        assert isinstance(await RateLimiter(two).acquire("acme", tool, 5.0), RateLimited)
    finally:
        await one.close()
        await two.close()


def test_concurrency_cap_refuses_beyond_the_cap_and_frees_on_exit(make_tool):
    tool = make_tool("slow", max_concurrency=1)
    limiter = ConcurrencyLimiter()
    with limiter.slot(tool) as first:
        assert first is True
        with limiter.slot(tool) as second:
            assert second is False
    assert limiter.in_flight("slow") == 0
    with limiter.slot(tool) as again:
        assert again is True


def test_rate_limited_code_is_stable():
    assert Code.RATE_LIMITED.value == "rate_limited" and Code.CONCURRENCY_LIMITED.value == "concurrency_limited"
