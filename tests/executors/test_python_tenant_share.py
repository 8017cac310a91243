"""Sync python tools of one tenant hold at most ``threads_per_tenant`` of the executor's threads:
a tenant whose tools hang (or run long) waits for its own threads and never starves the others."""

import asyncio

import pytest

from gateway.config import Config
from gateway.execute import ExecuteStage, executor_factories
from gateway.executors.base import ExecutorRegistry
from gateway.executors.python import PythonExecutor
from tests.executors._helpers import HANG, call_context
from tests.executors.data import python_tools

QUICK = "tests.executors.test_python_tenant_share:quick"


def quick(args, ctx):
    return {"tenant": ctx.tenant}


@pytest.fixture
async def stage(tmp_path):
    s = ExecuteStage(ExecutorRegistry({"python": lambda: PythonExecutor(max_threads=2, threads_per_tenant=1)}),
                     tmp_path / "sb")
    yield s
    await s.close()


async def test_a_tenant_whose_tools_hang_does_not_starve_another(stage, make_tool, gate):
    hang = make_tool("hang", timeout_seconds=0.3, max_attempts=1, executor={"kind": "python", "callable": HANG})
    fast = make_tool("fast", timeout_seconds=2, max_attempts=1, executor={"kind": "python", "callable": QUICK})
    # acme's first call takes its one thread and hangs past its timeout; its second waits for acme's own
    # thread (never starting); globex still has the pool's other thread and is answered at once
    (held, _), (waited, _), (other, _) = await asyncio.gather(
        stage.run(call_context(hang, "acme", {"gate": gate})),
        stage.run(call_context(hang, "acme", {"gate": gate})),
        stage.run(call_context(fast, "globex", {})))
    assert other.ok and other.data == {"tenant": "globex"}
    assert held.error.type == "timeout" and not held.error.retryable  # ran: its thread is still going
    assert waited.error.type == "timeout" and waited.error.retryable
    assert "threads this tenant may hold were all taken" in waited.error.message
    assert len(python_tools.STARTED[gate]) == 1  # the waiting call never ran


async def test_a_thread_left_running_keeps_its_tenant_share_until_it_ends(stage, make_tool, gate):
    hang = make_tool("hang", timeout_seconds=0.2, max_attempts=1, executor={"kind": "python", "callable": HANG})
    fast = make_tool("fast", timeout_seconds=0.5, max_attempts=1, executor={"kind": "python", "callable": QUICK})
    held, _ = await stage.run(call_context(hang, "acme", {"gate": gate}))
    assert held.error.type == "timeout"
    blocked, _ = await stage.run(call_context(fast, "acme", {}))  # acme's one thread is still the hung one
    assert blocked.error.type == "timeout" and blocked.error.retryable
    python_tools.GATES[gate].set()
    assert python_tools.ENDED[gate].wait(5)
    await asyncio.sleep(0.05)  # the share comes back on the loop
    again, _ = await stage.run(call_context(fast, "acme", {}))
    assert again.ok and again.data == {"tenant": "acme"}


async def test_the_shares_come_back_after_many_calls(stage, make_tool):
    fast = make_tool("fast", timeout_seconds=2, max_attempts=1, executor={"kind": "python", "callable": QUICK})
    results = await asyncio.gather(*(stage.run(call_context(fast, "acme", {})) for _ in range(50)))
    assert all(r.ok for r, _ in results)  # one thread for acme, taken and given back 50 times


def test_the_limits_reach_the_executor(tmp_path):
    config = Config.model_validate({"data_dir": str(tmp_path), "limits": {"python_threads": 4,
                                                                        "python_threads_per_tenant": 3}})
    executor = executor_factories(config)["python"]()
    assert executor._share == 3 and executor._pool._max_workers == 4


def test_a_tenant_share_larger_than_the_pool_is_refused():
    with pytest.raises(Exception) as info:
        Config.model_validate({"limits": {"python_threads": 4, "python_threads_per_tenant": 5}})
    assert "python_threads_per_tenant_too_large" in str(info.value)
    with pytest.raises(ValueError, match="threads_per_tenant must be 1..2"):
        PythonExecutor(max_threads=2, threads_per_tenant=3)


async def test_with_the_defaults_three_tenants_whose_tools_hang_leave_a_fourth_its_threads(tmp_path, make_tool, gate):
    stage = ExecuteStage(ExecutorRegistry({"python": PythonExecutor}), tmp_path / "sb")  # 16 threads, 4 per tenant
    hang = make_tool("hang", timeout_seconds=0.3, max_attempts=1, executor={"kind": "python", "callable": HANG})
    fast = make_tool("fast", timeout_seconds=2, max_attempts=1, executor={"kind": "python", "callable": QUICK})
    try:
        hung = [stage.run(call_context(hang, tenant, {"gate": gate})) for tenant in ("a", "b", "c") for _ in range(6)]
        *held, (other, _) = await asyncio.gather(*hung, stage.run(call_context(fast, "d", {})))
        assert other.ok and other.data == {"tenant": "d"}
        assert len(python_tools.STARTED[gate]) == 12  # four of each hanging tenant's six ever ran
        assert all(r.error.type == "timeout" for r, _ in held)
    finally:
        python_tools.GATES[gate].set()
        await stage.close()
