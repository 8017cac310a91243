"""Closed-loop load against one server, the head-of-line probe and the memory probe.

The client runs in the parent process on one grpc.aio channel; ``concurrency`` workers each
send the next call as soon as the previous one returns, for a fixed time after a warm-up.
Latency is measured around each call; the server's CPU is read from /proc over the window.
A call counts as an error on a transport error, another code than expected, or a replayed
answer (every request is new, so a replay means the harness or the gateway got it wrong).
The open-loop (paced) measurement is in ``bench.paced``; ``interleaved`` alternates one
caller's calls between two servers, for a difference between two paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from bench.scenarios import METADATA, SCENARIOS, Scenario, request


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of an unsorted list (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


@dataclass
class RunResult:
    calls: int
    throughput: float  # calls per second
    p50_ms: float
    p99_ms: float
    cpu_us_per_call: float  # server process CPU (all threads) per completed call
    errors: int  # transport errors and calls that returned another code than expected

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


CHANNELS = 1
"""Connections per load run (``--channels``). The kernel spreads connections, not calls, over
the processes of a ``--workers`` server, so N workers need several channels; echo and the
gateway always get the same number."""


@contextlib.asynccontextmanager
async def stubs(address: str) -> AsyncIterator[list[pb_grpc.ToolGatewayStub]]:
    """``CHANNELS`` stubs, each on its own connection (a local subchannel pool per channel)."""
    def options(i: int) -> list[tuple[str, Any]]:  # a distinct arg too, so no two channels share a connection
        return [("grpc.use_local_subchannel_pool", 1), ("toolgate.bench.channel", i)] if CHANNELS > 1 else []

    channels = [grpc.aio.insecure_channel(address, options=options(i)) for i in range(CHANNELS)]
    try:
        yield [pb_grpc.ToolGatewayStub(c) for c in channels]
    finally:
        for c in channels:
            await c.close()


def accepted(resp: pb.ToolCallResponse, scenario: Scenario) -> bool:
    return resp.code == scenario.expect and not resp.replayed


async def send(stub: pb_grpc.ToolGatewayStub, req: pb.ToolCallRequest, scenario: Scenario) -> bool:
    """One call; True when it answered as the scenario expects (a transport error is False)."""
    try:
        return accepted(await stub.ExecuteTool(req, metadata=METADATA, timeout=30), scenario)
    except grpc.RpcError:
        return False


async def after_warmup(
    callers: list[Awaitable[None]], t_warm: float, clock: Callable[[], float], cpu: Callable[[], float]
) -> tuple[float, float]:
    """Run ``callers`` together; return the server CPU seconds used from ``t_warm`` to their
    end, and the time they ended."""
    async def cpu_mark() -> float:
        await asyncio.sleep(max(0.0, t_warm - clock()))
        return cpu()

    marker = asyncio.create_task(cpu_mark())
    await asyncio.gather(*callers)
    cpu_end, t_done = cpu(), clock()
    return cpu_end - await marker, t_done


async def closed_loop(
    address: str, scenario: Scenario, concurrency: int, seconds: float, warmup: float, cpu: Callable[[], float],
    supply: Callable[[], pb.ToolCallRequest | None] | None = None,
) -> RunResult:
    """``supply`` gives each next request (default: ``request(scenario)``); when it returns
    None the run ends early and throughput is over the time up to the last answer."""
    next_request = supply or (lambda: request(scenario))
    async with stubs(address) as pool:
        loop = time.perf_counter
        start = loop()
        t_warm, t_end = start + warmup, start + warmup + seconds
        latencies: list[float] = []
        done_after_warm = 0
        errors = 0

        async def worker(stub: pb_grpc.ToolGatewayStub) -> None:
            nonlocal done_after_warm, errors
            while (t0 := loop()) < t_end and (req := next_request()) is not None:
                ok = await send(stub, req, scenario)
                t1 = loop()
                errors += not ok
                if t1 >= t_warm:
                    done_after_warm += 1
                    if t0 >= t_warm:
                        latencies.append(t1 - t0)

        cpu_used, t_done = await after_warmup(
            [worker(pool[i % len(pool)]) for i in range(concurrency)], t_warm, loop, cpu
        )
    window = max(t_done - t_warm, 1e-9)
    return RunResult(
        calls=done_after_warm,
        throughput=done_after_warm / window,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        cpu_us_per_call=cpu_used / max(done_after_warm, 1) * 1e6,
        errors=errors,
    )


async def counted(address: str, scenario: Scenario, calls: int, concurrency: int = 32) -> int:
    """Send exactly ``calls`` calls with ``concurrency`` workers; return the number of errors."""
    remaining = calls
    errors = 0
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolGatewayStub(channel)

        async def worker() -> None:
            nonlocal remaining, errors
            while remaining > 0:
                remaining -= 1
                errors += not await send(stub, request(scenario), scenario)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


async def _sequential_latencies(stub: pb_grpc.ToolGatewayStub, scenario: Scenario, *, count: int = 0,
                                until: Callable[[], bool] | None = None) -> tuple[list[float], int]:
    latencies, errors = [], 0
    while (count and len(latencies) < count) or (until is not None and not until()):
        t0 = time.perf_counter()
        resp = await stub.ExecuteTool(request(scenario), metadata=METADATA, timeout=30)
        latencies.append(time.perf_counter() - t0)
        errors += not accepted(resp, scenario)
    return latencies, errors


async def head_of_line(address: str, slow_calls: int = 1000, slow_seconds: float = 1.0, idle_samples: int = 200) -> dict[str, Any]:
    """A fast allow call's latency while ``slow_calls`` calls sleep in a tool, against idle.

    Fast calls go one after another, on their own connection, from the moment the slow calls
    are sent until the last one has answered; so the window includes the gateway admitting
    the burst of slow calls (queueing behind their validation, claims and policy) as well as
    the time they spend sleeping, and ``during_max_ms`` shows the worst wait.
    """
    fast = SCENARIOS["allow"]
    slow = Scenario("slow", "embedded", "slow", {"seconds": slow_seconds}, "ok")
    own_connection = [("grpc.use_local_subchannel_pool", 1)]  # the fast caller is another agent, on its own socket
    async with grpc.aio.insecure_channel(address) as slow_channel, \
            grpc.aio.insecure_channel(address, options=own_connection) as fast_channel:
        fast_stub, slow_stub = pb_grpc.ToolGatewayStub(fast_channel), pb_grpc.ToolGatewayStub(slow_channel)
        await _sequential_latencies(fast_stub, fast, count=20)  # warm the connection
        idle, idle_errors = await _sequential_latencies(fast_stub, fast, count=idle_samples)
        started = time.perf_counter()
        calls = [asyncio.ensure_future(slow_stub.ExecuteTool(request(slow), metadata=METADATA, timeout=60))
                 for _ in range(slow_calls)]
        all_done = asyncio.ensure_future(asyncio.wait(calls))
        during, during_errors = await _sequential_latencies(fast_stub, fast, until=all_done.done)
        replies = await asyncio.gather(*calls, return_exceptions=True)
        slow_wall = time.perf_counter() - started
    slow_ok = sum(1 for r in replies if isinstance(r, pb.ToolCallResponse) and r.code == "ok")
    return {
        "idle_p50_ms": percentile(idle, 50) * 1000,
        "during_p50_ms": percentile(during, 50) * 1000,
        "during_p99_ms": percentile(during, 99) * 1000,
        "during_max_ms": max(during) * 1000,
        "during_samples": len(during),
        "ratio_p50": percentile(during, 50) / percentile(idle, 50),
        "slow_ok": slow_ok,
        "slow_calls": slow_calls,
        "slow_wall_s": slow_wall,
        "errors": idle_errors + during_errors,
    }


async def interleaved(targets: list[tuple[str, Scenario]], seconds: float, warmup: float) -> list[dict[str, float]]:
    """One caller sending one call to each target in turn, the order reversed every turn, for
    ``seconds`` after ``warmup``; per target its p50, p99, calls timed and errors.

    Two closed-loop runs of the same length are seconds apart, and on a shared machine what
    else runs changes in between; here each target's calls sit milliseconds from the other's,
    so a difference between them is the paths', not the minutes'. Each target on its own
    connection."""
    async with contextlib.AsyncExitStack() as stack:
        channels = [await stack.enter_async_context(grpc.aio.insecure_channel(address)) for address, _ in targets]
        stubs_ = [pb_grpc.ToolGatewayStub(c) for c in channels]
        loop = time.perf_counter
        start = loop()
        t_warm, t_end = start + warmup, start + warmup + seconds
        latencies: list[list[float]] = [[] for _ in targets]
        errors = [0] * len(targets)
        order = list(range(len(targets)))
        while loop() < t_end:
            for i in order:
                scenario = targets[i][1]
                t0 = loop()
                ok = await send(stubs_[i], request(scenario), scenario)
                t1 = loop()
                errors[i] += not ok
                if t0 >= t_warm:
                    latencies[i].append(t1 - t0)
            order.reverse()
    return [{"p50_ms": percentile(lat, 50) * 1000, "p99_ms": percentile(lat, 99) * 1000, "calls": len(lat),
             "errors": err} for lat, err in zip(latencies, errors)]


def median_of(runs: list[RunResult]) -> dict[str, float]:
    """Field-wise median over rounds."""
    return {k: statistics.median(getattr(r, k) for r in runs) for k in RunResult.__dataclass_fields__}
