"""Several worker processes behind one port (``workers: N``), to use more than one core.

One Python process serves at most one core's worth of calls (the GIL). With ``workers: N``
``toolgate serve`` becomes a supervisor: it prepares the data dir once (store schema, grant
key), reserves the port, and starts N worker processes that each run a whole gateway bound
to that port with ``SO_REUSEPORT``. The kernel spreads *connections* over the workers, so a
client needs several connections (channels) to use several workers.

What the workers share and what each keeps:

- shared through the store: idempotency and grant claims (at-most-once holds across workers
  exactly as across replicas), rate-limit buckets, approvals and votes;
- per worker: the audit log (each worker appends its own hash chain to
  ``<audit stem>.w<i><suffix>``; ``toolgate audit verify`` checks each file), waiters on a
  running claim (other workers poll the store), and ``Approvals.Watch`` events (a stream sees
  the events of its own worker; re-watch with ``include_current`` to catch up, as across
  replicas);
- refused at load: a tool's ``max_concurrency`` (a per-process cap: N workers would admit N
  times as many) and a metrics port (N endpoints cannot share one).

Signals: SIGTERM and SIGINT stop every worker; SIGHUP is forwarded (each reloads its policy).
A worker that exits on its own takes the others down and ``serve`` exits 1: restarting is the
process supervisor's job (systemd, Kubernetes), which then sees one failed unit, not a
half-alive one. Linux only (``SO_REUSEPORT`` load balancing).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Callable

from gateway.config import Config

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
"""A worker's grace at SIGTERM (``server.shutdown``: 5 s for the calls and the tools, then ``drain``
waits as long again for the stopped tools' results) with room to spare, before it is killed."""


def worker_audit_path(audit_path: Path, worker: int | str) -> Path:
    """``audit.jsonl`` -> ``audit.w0.jsonl``: one hash chain per worker."""
    return audit_path.with_name(f"{audit_path.stem}.w{worker}{audit_path.suffix}")


def reserve_port(address: str) -> tuple[socket.socket, str]:
    """Bind (not listen) a ``SO_REUSEPORT`` socket on ``address``; port 0 picks a free one.

    Held open while the workers run, so no other program can take the port between their
    binds; only the workers' sockets listen, so only they receive connections.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, int(port)))
    except OSError:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    return sock, f"[{host}]:{bound}" if family == socket.AF_INET6 else f"{host}:{bound}"


async def prepare(config: Config) -> None:
    """What must exist before workers start, made once: data dir, store schema, grant key."""
    from gateway.store import open_store

    from gateway.audit_file import PRIVATE_DIR

    config.data_path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    store = open_store(config)
    try:
        from gateway.approvals.keyring import gateway_grant_keys
        from gateway.audit_sign import load_signer

        gateway_grant_keys(config)
        if (key := config.audit_signing_key_path) is not None:  # made here once, not by each worker
            load_signer(key)
    finally:
        await store.close()


def supervise(config: Config, address: str, *, ready: Callable[[str], None] | None = None) -> int:
    """Run ``config.workers`` gateway workers on ``address`` until a signal; ``serve``'s exit code."""
    asyncio.run(prepare(config))
    return run_workers(config.workers, address, _worker_main, (config,), ready=ready, name="toolgate-worker")


def run_workers(count: int, address: str, target: Callable[..., None], args: tuple[Any, ...] = (), *,
                ready: Callable[[str], None] | None = None, name: str = "worker") -> int:
    """Start ``count`` processes of ``target(*args, address, index, link)`` on one reserved port.

    Each must send ``("ready", "")`` (or ``("error", why)``) on ``link`` once it listens, and
    stop on SIGTERM. Returns 0 after SIGTERM/SIGINT, 1 when a worker exits on its own; raises
    ``RuntimeError`` when one fails to start. The bench's echo baseline runs under this too,
    so both sides of a comparison have the same layout.
    """
    holder, address = reserve_port(address)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: gRPC must not cross a fork
    procs: list[Any] = []
    links: list[Any] = []
    stopping = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    def forward_hup(signum: int, _frame: Any) -> None:
        for p in procs:
            if p.is_alive():
                _kill(p.pid, signal.SIGHUP)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, forward_hup)
    try:
        for i in range(count):
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=target, args=(*args, address, i, child_end), name=f"{name}-{i}")
            proc.start()
            child_end.close()
            procs.append(proc)
            links.append(parent_end)
        failure = _await_ready(procs, links)
        if failure:
            _stop_all(procs)
            raise RuntimeError(failure)
        if ready is not None:
            ready(address)
        while not stopping:
            multiprocessing.connection.wait([p.sentinel for p in procs], timeout=0.5)
            dead = [p for p in procs if not p.is_alive()]
            if dead and not stopping:
                _stop_all(procs)
                print(f"toolgate: worker {dead[0].name} exited with code {dead[0].exitcode}; stopping", flush=True)
                return 1
        _stop_all(procs)
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        holder.close()


def _await_ready(procs: list[Any], links: list[Any]) -> str:
    """Wait for every worker's 'ready' (or its error); '' when all are serving."""
    by_link = dict(zip(links, procs))
    by_sentinel = {p.sentinel: p for p in procs}
    end = time.monotonic() + START_TIMEOUT_SECONDS
    while by_link:
        left = end - time.monotonic()
        if left <= 0:
            return f"{len(by_link)} worker(s) did not start in {START_TIMEOUT_SECONDS:g} s"
        waiting = [*by_link, *(p.sentinel for p in by_link.values())]
        for item in multiprocessing.connection.wait(waiting, timeout=left):
            proc = by_link.get(item)
            if proc is None:  # a sentinel: the process ended before saying it was ready
                return f"{by_sentinel[item].name} exited during start-up"
            try:
                kind, detail = item.recv()
            except EOFError:
                return f"{proc.name} exited during start-up"
            if kind != "ready":
                return f"{proc.name}: {detail}"
            del by_link[item]
    return ""


def _stop_all(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            _kill(p.pid, signal.SIGTERM)
    for p in procs:
        p.join(STOP_TIMEOUT_SECONDS)
        if p.is_alive():
            p.kill()
            p.join()


def _kill(pid: int | None, sig: int) -> None:
    if pid is not None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _worker_main(config: Config, address: str, worker: int, link: Any) -> None:  # run_workers' target
    """A worker: a whole gateway on the shared port, its own audit chain."""
    from gateway.server import serve

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor turns Ctrl-C into SIGTERM

    def ready(_addr: str) -> None:
        link.send(("ready", ""))

    try:
        asyncio.run(serve(config, address, ready=ready, worker=worker))
    except Exception as exc:
        try:
            link.send(("error", f"cannot start: {exc}"))
        except OSError:
            pass
        raise SystemExit(2) from exc
