"""Run a Python callable named ``module:function`` in the descriptor.

The function is called as ``fn(args, ctx)`` where ``ctx`` is the ``ExecRequest``; it may be
async (an ``async def``, an object with an async ``__call__``, or a function that returns an
awaitable, which is awaited: never reported as the tool's result unrun). Its return value is
the observation's data (must be JSON-serialisable); an exception is a tool error. The
executor stops at ``request.timeout`` itself (error type ``timeout``).

A sync function runs in a worker thread of this executor's own bounded pool
(``max_threads``), so it can neither block the event loop nor take the loop's default pool,
which serves name resolution (``loop.getaddrinfo``) for the HTTP executor. One tenant holds at
most ``threads_per_tenant`` of those threads (running, queued, or left running past a timeout);
its further sync calls wait for one of its own to end. A tenant whose tools hang so holds its
share and no more: it takes ``max_threads / threads_per_tenant`` such tenants at once (4 with
the defaults) to leave the others no thread. **A Python thread
cannot be killed**: at the timeout the caller gets ``timeout`` at once, but a function already
running goes on until it returns — its side effects may still happen. The timeout result says
so and is not retryable, the thread is handed to the execute stage (``ExecRequest.linger``),
which keeps the tool's concurrency slot taken until it ends (so ``max_concurrency`` bounds
threads too) and starts no retry meanwhile. A call still waiting for a free thread at the
timeout never starts. Tools that must be stoppable belong in a subprocess (killed at the timeout).

The threads are daemon threads of this executor's own (``DaemonThreads``), not a
``ThreadPoolExecutor``'s, which the interpreter joins at exit whatever ``shutdown(wait=False)``
says: a sync tool running at a stop held the stopped gateway up for as long as it ran (for good, if
it never returned), its side effect landing after the audit log had closed. At a stop the gateway
writes such a call's result (``outcome_unknown``: it started) and closes its store and audit log;
the process then exits, and the thread ends with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable

from gateway.config import DEFAULT_MAX_THREADS, DEFAULT_THREADS_PER_TENANT
from gateway.executors.base import ExecRequest, ExecResult


class PythonExecutor:
    enforces_timeout = True
    """Answers at ``request.timeout`` itself (a thread it cannot stop is handed to the stage)."""

    @staticmethod
    def confines_hosts(tool: Any) -> bool:
        """A python tool is gateway code, trusted to honour the ``hosts`` it is handed in
        ``context.constraints`` (the README says so to whoever writes one)."""
        return True

    @staticmethod
    def honours_constraints(tool: Any) -> bool:
        """A python tool receives the effective constraints as ``context.constraints`` and is
        trusted to honour every key of them (the README says so too)."""
        return True

    def __init__(self, *, max_threads: int = DEFAULT_MAX_THREADS, threads_per_tenant: int | None = None) -> None:
        share = min(DEFAULT_THREADS_PER_TENANT, max_threads) if threads_per_tenant is None else threads_per_tenant
        if not 1 <= share <= max_threads:
            raise ValueError(f"threads_per_tenant must be 1..{max_threads} (max_threads), got {share}")
        self._cache: dict[str, tuple[Callable[..., Any], bool]] = {}
        """callable reference -> (the function, whether it runs on the loop: ``_is_async``)"""
        self._pool = DaemonThreads(max_threads, "toolgate-python")
        self._share = share
        self._shares: dict[str, asyncio.Semaphore] = {}
        """One per tenant that ever ran a sync tool (tenants are configured, so a bounded few)."""

    async def close(self) -> None:
        """Drop calls still waiting for a thread; running ones cannot be stopped: they end at their
        function's return, or with the process."""
        self._pool.shutdown()

    def _load(self, ref: str) -> tuple[Callable[..., Any], bool]:
        loaded = self._cache.get(ref)
        if loaded is None:
            module, _, name = ref.partition(":")
            if not module or not name:
                raise ValueError(f"python executor callable must be 'module:function', got {ref!r}")
            fn = getattr(importlib.import_module(module), name)
            loaded = self._cache[ref] = (fn, _is_async(fn))
        return loaded

    async def execute(self, request: ExecRequest) -> ExecResult:
        fn, on_loop = self._load(request.tool.executor.callable)
        args = dict(request.args)
        thread: Future[Any] | None = None
        waiting_share = False
        deadline = asyncio.timeout(request.timeout)
        try:
            async with deadline:
                if on_loop:
                    data = await fn(args, request)
                else:
                    waiting_share = True
                    share = await self._tenant_thread(request.tenant)
                    waiting_share = False
                    thread = self._start(fn, args, request, share)
                    data = await asyncio.wrap_future(thread)  # cancelling it cancels a call not yet started
                    if inspect.isawaitable(data):  # a sync wrapper around an async tool: run what it handed back
                        data = await data
        except ToolFailure as exc:
            return ExecResult.failure(exc.type, str(exc), retryable=exc.retryable)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own TimeoutError
                return ExecResult.failure(type(exc).__name__, str(exc), retryable=False)
            if waiting_share:
                return ExecResult.failure("timeout", (
                    f"no result within {request.timeout:g}s: the {self._share} python threads this tenant may "
                    "hold were all taken (its tools still running, or left running past a timeout); "
                    "the call never started"), retryable=True)
            return _timed_out(request.timeout, thread)
        except Exception as exc:  # the tool's own failure, reported as data
            return ExecResult.failure(type(exc).__name__, str(exc), retryable=False)
        return ExecResult(ok=True, data=data)

    async def _tenant_thread(self, tenant: str) -> asyncio.Semaphore:
        """Wait for one of ``tenant``'s thread shares; given back when its thread ends (``_start``)."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = asyncio.Semaphore(self._share)
        await share.acquire()
        return share

    def _start(self, fn: Callable[..., Any], args: dict[str, Any], request: ExecRequest,
               share: asyncio.Semaphore) -> Future[Any]:
        context = contextvars.copy_context()  # as asyncio.to_thread does
        try:
            thread = self._pool.submit(context.run, fn, args, request)
        except BaseException:
            share.release()
            raise
        thread.add_done_callback(_give_back(asyncio.get_running_loop(), share))  # ran, failed or cancelled unrun
        if request.linger is not None:
            request.linger(thread)
        return thread


def _give_back(loop: asyncio.AbstractEventLoop, share: asyncio.Semaphore) -> Callable[[Future[Any]], None]:
    """A done callback (it runs on the worker thread) that releases ``share`` on the loop."""
    def ended(_: Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(share.release)
        except RuntimeError:  # the loop is closed: the gateway is gone, and its shares with it
            pass
    return ended


def _is_async(fn: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one: run on the loop."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _timed_out(timeout: float, thread: Future[Any] | None) -> ExecResult:
    if thread is None or thread.cancel():  # an async function (cancelled), or a call that never started
        return ExecResult.failure("timeout", f"no result within {timeout:g}s", retryable=True)
    if thread.done():  # the function returned an awaitable, and that was cancelled at the timeout
        return ExecResult.failure(
            "timeout", f"no result within {timeout:g}s; the function had returned (its side effects may have "
            "happened) and what it handed back was cancelled", retryable=False)
    return ExecResult.failure(
        "timeout", f"no result within {timeout:g}s; the function is still running (a Python thread cannot "
        "be stopped) and may yet complete, side effects included", retryable=False)


class DaemonThreads:
    """Up to ``max_workers`` daemon threads running the functions handed to ``submit``, in order.

    What ``ThreadPoolExecutor`` does for the executor, except at exit: its threads are joined
    then, so one sync tool that does not return keeps the process alive. These end with the
    process. A thread is started when a call finds none idle, up to ``max_workers``."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._max_workers, self._name = max_workers, name
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._idle = threading.Semaphore(0)
        """Released by a thread each time it waits for a job: ``submit`` starts none while one does."""
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on a thread; the future, cancelled, drops the call if it has not started."""
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the python executor is closed: no new call starts")
            self._jobs.put((future, fn, args))
            if not self._idle.acquire(blocking=False) and self._threads < self._max_workers:
                thread = threading.Thread(target=self._work, name=f"{self._name}_{self._threads}", daemon=True)
                thread.start()
                self._threads += 1
        return future

    def shutdown(self) -> None:
        """Cancel the calls not started; idle threads end now, running ones once their function returns."""
        with self._lock:
            self._closed = True
            threads = self._threads
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in range(threads):
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            _run(*job)
            del job  # the call's arguments and result are not held while the thread waits
            self._idle.release()


def _run(future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if not future.set_running_or_notify_cancel():  # cancelled while it waited: never started
        return
    try:
        result = fn(*args)
    except BaseException as exc:  # as ThreadPoolExecutor: the caller sees what the function raised
        future.set_exception(exc)
    else:
        future.set_result(result)


class ToolFailure(Exception):
    """Raised by a python tool to report a typed failure (e.g. ``not_found``)."""

    def __init__(self, type_: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.type = type_
        self.retryable = retryable
