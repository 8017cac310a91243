"""Sync python tools for the executor tests, called in worker threads of the python executor.

``hang`` records that it started, then blocks until the test opens its gate (``GATES[gate]``);
``fail_with`` raises with the message it is given.
"""

import threading

GATES: dict[str, threading.Event] = {}
STARTED: dict[str, list[str]] = {}
ENDED: dict[str, threading.Event] = {}


def gate(name: str) -> threading.Event:
    """A fresh closed gate ``name`` (and its bookkeeping)."""
    GATES[name], STARTED[name], ENDED[name] = threading.Event(), [], threading.Event()
    return GATES[name]


def hang(args, ctx):
    name = args["gate"]
    STARTED[name].append(ctx.decision_id)
    try:
        GATES[name].wait(30)  # bounded: a failing test cannot leave the thread behind for long
    finally:
        ENDED[name].set()
    return {"released": True}


def fail_with(args, ctx):
    raise RuntimeError(args["message"])


RAN: list[str] = []
"""Decision ids of the calls ``async_behind_a_sync_wrapper`` and ``async_callable`` really ran."""


async def _record(args, ctx):
    RAN.append(ctx.decision_id)
    return {"ran": True}


def async_behind_a_sync_wrapper(args, ctx):
    """A plain function returning a coroutine (as a sync decorator around an async tool does)."""
    return _record(args, ctx)


class _AsyncCallable:
    async def __call__(self, args, ctx):
        return await _record(args, ctx)


async_callable = _AsyncCallable()


async def _sleep_long(args, ctx):
    import asyncio

    await asyncio.sleep(30)


def slow_coroutine_behind_a_sync_wrapper(args, ctx):
    """Returns at once; what it hands back outlives any short timeout."""
    return _sleep_long(args, ctx)
