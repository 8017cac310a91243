"""Open-loop (paced) latency: a fixed aggregate send rate, whatever the server does.

A closed loop measures latency at saturation (each caller waits ≈ callers / throughput), so
it cannot test a latency budget. Here the send times are fixed in advance — call ``i`` is due
at ``start + i / rate`` — and ``callers`` workers share them: a free worker takes the next
due call, waits for its time and sends it. When all workers are busy the call goes out late,
and that lag counts: latency runs from the *scheduled* time to the answer, so a stalled
server cannot hide the calls it delayed (no coordinated omission). ``service_*`` is from the
actual send, and ``send_lag_*`` shows how late calls left (client timer granularity, about
1 ms on asyncio's epoll loop, is in both echo and gateway runs and cancels in "added").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from bench import load
from bench.load import percentile
from bench.scenarios import METADATA, Scenario, request
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc


@dataclass
class PacedResult:
    rate_per_s: float  # the schedule's aggregate send rate
    answered_per_s: float  # calls answered per second of the window (≈ rate unless the server falls behind)
    calls: int  # calls scheduled inside the window (latency samples)
    p50_ms: float  # from the scheduled send time to the answer
    p99_ms: float
    service_p50_ms: float  # from the actual send to the answer
    service_p99_ms: float
    send_lag_p50_ms: float  # actual send - scheduled send
    send_lag_p99_ms: float
    cpu_us_per_call: float  # server process CPU per call answered in the window
    errors: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def open_loop(
    address: str, scenario: Scenario, callers: int, rate: float, seconds: float, warmup: float, cpu: Callable[[], float]
) -> PacedResult:
    """Send ``rate`` calls per second with at most ``callers`` outstanding, for ``warmup + seconds``."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    clock = time.perf_counter
    total = int(rate * (warmup + seconds))
    latency: list[float] = []
    service: list[float] = []
    lag: list[float] = []
    errors = answered = 0
    taken = 0
    async with load.stubs(address) as pool:
        for stub in pool:  # connect before the schedule
            await stub.ExecuteTool(request(scenario), metadata=METADATA, timeout=30)
        start = clock() + 0.01
        t_warm = start + warmup

        async def caller(stub: pb_grpc.ToolGatewayStub) -> None:
            nonlocal taken, errors, answered
            while taken < total:
                due = start + taken / rate
                taken += 1
                if (wait := due - clock()) > 0:
                    await asyncio.sleep(wait)
                sent = clock()
                ok = await load.send(stub, request(scenario), scenario)
                done = clock()
                errors += not ok
                if done >= t_warm:
                    answered += 1
                if due >= t_warm:
                    latency.append(done - due)
                    service.append(done - sent)
                    lag.append(sent - due)

        cpu_used, t_done = await load.after_warmup(
            [caller(pool[i % len(pool)]) for i in range(callers)], t_warm, clock, cpu
        )
    return PacedResult(
        rate_per_s=rate,
        answered_per_s=answered / max(t_done - t_warm, 1e-9),
        calls=len(latency),
        p50_ms=percentile(latency, 50) * 1000,
        p99_ms=percentile(latency, 99) * 1000,
        service_p50_ms=percentile(service, 50) * 1000,
        service_p99_ms=percentile(service, 99) * 1000,
        send_lag_p50_ms=percentile(lag, 50) * 1000,
        send_lag_p99_ms=percentile(lag, 99) * 1000,
        cpu_us_per_call=cpu_used / max(answered, 1) * 1e6,
        errors=errors,
    )
