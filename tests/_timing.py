"""Timing for tests that check an operation's cost grows linearly in its input, robust to a loaded machine.

CI runs the suite once on a shared 2-core machine, and the suite's own servers and subprocesses run
beside it. A wall-clock time then counts the time the test was preempted: a run longer than a scheduler
slice (a few ms) is cut into pieces, a shorter one usually is not, which looks like a 2-3x step in cost
between two sizes. CPU time is free of that, but a burst of contention still inflates it by up to ~1.5x
for a while. So:

- the time is the CPU time of the calling thread (``cpu_seconds``; a worker process times itself);
- the sizes are timed in rounds, interleaved (each round times every size once, in ascending order), so
  a burst of load falls on every size alike and never on all of one size's runs in a row, and the least
  time of each size is kept: load only ever adds time;
- a case judged against linear time is timed for more rounds before the verdict stands: a linear
  operation's least times converge on its quiet ones, while a quadratic one stays above its limit
  however many rounds are taken (its growth is a property of the code, not of the machine);
- ``Timings.exponent`` fits the growth over several sizes (least squares of log time on log size:
  1 for linear time, 2 for quadratic), which a step at one size or one noisy size moves far less than it
  moves the ratio of two sizes.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence


def cpu_seconds(run: Callable[[Any], Any], arg: Any) -> float:
    """The CPU time of this thread in ``run(arg)``, the cyclic GC off (its passes add a growth of their own)."""
    gc.disable()
    try:
        started = time.thread_time()
        run(arg)
        return time.thread_time() - started
    finally:
        gc.enable()


def fitted_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """The least-squares slope of log(seconds) on log(size): about 1 for linear time, 2 for quadratic."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-9)) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


@dataclass
class Timings:
    sizes: list[int]
    seconds: list[float]
    """The least time of each size (``inf`` for a size not timed: one before it took over ``give_up``)."""
    rounds: int

    @property
    def exponent(self) -> float:
        return fitted_exponent(self.sizes, self.seconds)

    def __str__(self) -> str:
        times = ", ".join(f"{t * 1e3:.2f} ms on {n:,}" for n, t in zip(self.sizes, self.seconds))
        exponent = f"growth exponent {self.exponent:.2f}, " if all(map(math.isfinite, self.seconds)) else ""
        return f"{times} ({exponent}least of {self.rounds} interleaved rounds)"


def least_times(time_one: Callable[[int], float], sizes: Sequence[int], linear: Callable[[Timings], bool], *,
                min_rounds: int = 3, max_rounds: int = 9, budget: float = math.inf,
                give_up: float = math.inf) -> Timings:
    """The least time of each size, by ``time_one(size)``, over rounds that each time every size in
    ascending order: ``min_rounds``, then more while ``linear`` (the test's verdict) is false, up to
    ``max_rounds`` or until the rounds have taken ``budget`` seconds in all (set well above what
    ``max_rounds`` of a linear case take, it only cuts short the timing of a super-linear one). Timing
    stops at a size that took over ``give_up``, so a catastrophic case is not timed on larger sizes."""
    timings = Timings(list(sizes), [math.inf] * len(sizes), 0)
    spent = 0.0
    while True:
        for i, size in enumerate(sizes):
            took = time_one(size)
            spent += took
            timings.seconds[i] = min(timings.seconds[i], took)
            if timings.seconds[i] > give_up:
                timings.rounds += 1
                return timings
        timings.rounds += 1
        if timings.rounds >= max_rounds or timings.rounds >= min_rounds and (linear(timings) or spent > budget):
            return timings


class LoopTicks:
    """Counts the event loop's turns of ``interval`` while it is entered (``async with``): a
    blocking call on the loop meanwhile leaves ``count`` near 0."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval, self.count = interval, 0
        self._task: Any = None

    async def _tick(self) -> None:
        import asyncio

        while True:
            await asyncio.sleep(self.interval)
            self.count += 1

    async def __aenter__(self) -> "LoopTicks":
        import asyncio

        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
