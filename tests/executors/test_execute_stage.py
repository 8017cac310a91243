"""The execute stage with real executors: retries only when safe, admission (rate limit, concurrency)."""

import pytest

from gateway.codes import Code
from gateway.execute import ExecuteStage, RetryPolicy, executor_factories
from gateway.executors.base import ExecutorRegistry
from gateway.store.sqlite import SQLiteStore
from tests.executors._helpers import call_context


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
async def store(tmp_path):
    s = SQLiteStore(tmp_path / "s.db")
    yield s
    await s.close()


def _stage(tmp_path, store, clock, **kw):
    return ExecuteStage(ExecutorRegistry(executor_factories()), tmp_path / "sandbox", store=store,
                        clock=clock, sleep=clock.sleep, rand=lambda: 1.0, retry=RetryPolicy(0.1, 1.0), **kw)


def _flaky(failures: int):
    state = {"n": 0}

    def route(seen):
        state["n"] += 1
        return (503, {}, b"busy") if state["n"] <= failures else (200, {"content-type": "application/json"}, b"{}")

    return route, state


def _http_tool(make_tool, server, **kw):
    return make_tool("flaky", executor={"kind": "http", "url": server.base + "/f", "allowed_hosts": ["127.0.0.1"],
                                        "options": {"allow_plain_http": True}}, **kw)


async def test_flaky_read_tool_is_retried_with_backoff_until_it_succeeds(tmp_path, store, http_server, make_tool):
    route, state = _flaky(2)
    server = http_server({"/f": route})
    clock = Clock()
    stage = _stage(tmp_path, store, clock)
    result, _ = await stage.run(call_context(_http_tool(make_tool, server, side_effect="read", max_attempts=4)))
    assert result.ok and result.attempts == 3 and state["n"] == 3
    assert clock.slept == [0.1, 0.2]  # exponential (rand=1.0 is the top of the jitter range)


async def test_write_tool_is_never_retried(tmp_path, store, http_server, make_tool):
    route, state = _flaky(1)
    server = http_server({"/f": route})
    clock = Clock()
    tool = _http_tool(make_tool, server, side_effect="write", max_attempts=5)
    result, _ = await _stage(tmp_path, store, clock).run(call_context(tool))
    assert not result.ok and result.attempts == 1 and state["n"] == 1 and clock.slept == []


async def test_idempotent_write_may_be_retried(tmp_path, store, http_server, make_tool):
    route, state = _flaky(1)
    server = http_server({"/f": route})
    tool = _http_tool(make_tool, server, side_effect="external_write", idempotent=True, max_attempts=2)
    result, _ = await _stage(tmp_path, store, Clock()).run(call_context(tool))
    assert result.ok and result.attempts == 2


async def test_non_retryable_failure_is_not_retried(tmp_path, store, http_server, make_tool):
    server = http_server({"/f": lambda s: (404, {}, b"no")})
    result, _ = await _stage(tmp_path, store, Clock()).run(call_context(_http_tool(make_tool, server, max_attempts=5)))
    assert result.attempts == 1 and len(server.seen) == 1


async def test_jitter_keeps_delays_within_the_exponential_bound():
    policy = RetryPolicy(0.2, 5.0)
    assert policy.delay(1, 0.5) == pytest.approx(0.1)
    assert policy.delay(10, 1.0) == 5.0
    assert policy.delay(3, 0.0) == 0.0


async def test_admission_rate_limits_the_n_plus_first_call_and_recovers_later(tmp_path, store, make_tool):
    clock = Clock()
    stage = _stage(tmp_path, store, clock)
    tool = make_tool("limited", rate_limit_per_minute=2)
    for _ in range(2):
        ctx = call_context(tool)
        assert await stage.admit(ctx) is None
        stage._slots.release(tool)  # not executed in this test
    refused = await stage.admit(call_context(tool))
    assert refused.code == Code.RATE_LIMITED and refused.retry_after_seconds > 0
    assert await stage.admit(call_context(tool, tenant="globex")) is None  # another tenant's bucket
    clock.now += refused.retry_after_seconds
    assert await stage.admit(call_context(tool)) is None


async def test_admission_enforces_the_concurrency_cap_until_the_call_finishes(tmp_path, store, make_tool):
    stage = _stage(tmp_path, store, Clock())
    tool = make_tool("one_at_a_time", max_concurrency=1, executor={"kind": "python",
                                                                     "callable": "gateway.testing:echo"})
    first = call_context(tool)
    assert await stage.admit(first) is None
    assert (await stage.admit(call_context(tool))).code == Code.CONCURRENCY_LIMITED
    await stage.run(first)
    assert await stage.admit(call_context(tool)) is None


@pytest.mark.parametrize("decided, hosts", [
    ({"hosts": None}, ["a.example"]),  # null cannot lift the descriptor's narrowing
    ({"hosts": ["a.example", "b.example"]}, ["a.example"]),  # nor can a longer list widen it
    ({"hosts": ["B.example"]}, []),  # policy may take hosts away
    ({"hosts": "a.example"}, ["a.example"]),
    ({}, ["a.example"]),
])
def test_policy_constraints_narrow_the_descriptors_hosts_and_never_widen_them(make_tool, decided, hosts):
    from policies import PolicyDecision

    from gateway.execute import effective_constraints

    tool = make_tool("fetch", executor={"kind": "http", "url": "https://a.example/x",
                                        "allowed_hosts": ["a.example", "b.example"]},
                     constraints={"hosts": ["a.example"], "root": "w"})
    ctx = call_context(tool)
    ctx.decision = PolicyDecision(decision="allow", constraints={**decided, "root": None, "limit": 3})
    assert effective_constraints(ctx) == {"hosts": hosts, "root": "w", "limit": 3}


@pytest.mark.parametrize("decided, hosts", [
    ({"hosts": 5}, []), ({"hosts": True}, []), ({"hosts": 0}, []), ({"hosts": {"a.example": 1}}, []),
    ({"hosts": ["a.example", 7, None]}, ["a.example"]), ({"hosts": "a.example"}, ["a.example"]),
    ({"hosts": ""}, [""]), ({"hosts": None}, None), ({}, None),
])
def test_a_hosts_constraint_written_oddly_narrows_to_a_list_of_names(make_tool, decided, hosts):
    """Whatever type policy gives ``hosts``, every later step reads one list of names (odd values
    mean no host at all), so none fails on it with an internal error and none reads it wider."""
    from policies import PolicyDecision

    from gateway.execute import effective_constraints

    tool = make_tool("fetch", executor={"kind": "http", "url": "https://a.example/x", "allowed_hosts": ["a.example"]})
    ctx = call_context(tool)
    ctx.decision = PolicyDecision(decision="allow", constraints=decided)
    assert effective_constraints(ctx).get("hosts") == hosts
