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
The workers stop together, under one deadline (``STOP_TIMEOUT_SECONDS``) for all of them; one
still there at its end is killed. A worker that exits on its own takes the others down and
``serve`` exits 1 (logged as ``worker_exited``): restarting is the process supervisor's job
(systemd, Kubernetes), which then sees one failed unit, not a half-alive one. Linux only
(``SO_REUSEPORT`` load balancing).

Each worker logs as ``toolgate serve`` does (one JSON object a line on stderr), each line with
its ``worker`` index; the supervisor's own lines have none.
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

import structlog

from gateway.config import Config

log = structlog.get_logger("toolgate.workers")

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
"""The workers' grace at SIGTERM, one deadline for all of them (``server.shutdown``: 5 s for the calls
and the tools, then ``drain`` waits as long again for the stopped tools' results, then at most
``serve_cmd.EXIT_GRACE_SECONDS`` for the interpreter's exit) with room to spare, before those still
there are killed."""


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
    stop on SIGTERM; those still running ``STOP_TIMEOUT_SECONDS`` after it (one deadline for
    all) are killed. Returns 0 after SIGTERM/SIGINT, 1 when a worker exits on its own; raises
    ``RuntimeError`` when one fails to start. The bench's echo baseline runs under this too,
    so both sides of a comparison have the same layout.
    """
    holder, address = reserve_port(address)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: gRPC must not cross a fork
    procs: list[Any] = []
    links: list[Any] = []
    stopping: list[str] = []  # the signal that asked: logged by the loop below, not in the handler

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signal.Signals(signum).name)

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
            dead = [i for i, p in enumerate(procs) if not p.is_alive()]
            if dead and not stopping:
                log.error("worker_exited", code="worker_exited", index=dead[0], exit_code=procs[dead[0]].exitcode)
                _stop_all(procs, why="worker_exited")
                return 1
        _stop_all(procs, why=stopping[0])
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


def _stop_all(procs: list[Any], *, why: str = "") -> None:
    """SIGTERM every worker and wait for them all together, ``STOP_TIMEOUT_SECONDS`` in all; kill
    those still there then (``why``: what asked, logged). Waited for one after the other, each
    with the whole timeout, N stuck workers took N times it: 41.7 s for two, past the pod's 25 s."""
    timeout, began = STOP_TIMEOUT_SECONDS, time.monotonic()
    if why:
        log.info("stopping", reason=why, workers=len(procs), deadline_seconds=timeout)
    for p in procs:
        if p.is_alive():
            _kill(p.pid, signal.SIGTERM)
    end = began + timeout
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    killed = [i for i, p in enumerate(procs) if p.is_alive()]
    for i in killed:
        log.warning("worker_killed", code="worker_killed", index=i, waited_seconds=timeout)
        procs[i].kill()
    for i in killed:
        procs[i].join()
    if why:
        log.info("stopped", seconds=round(time.monotonic() - began, 3), killed=killed)


def _kill(pid: int | None, sig: int) -> None:
    if pid is not None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _worker_main(config: Config, address: str, worker: int, link: Any) -> None:  # run_workers' target
    """A worker: a whole gateway on the shared port, its own audit chain, its logs as ``serve``'s
    (a spawned interpreter starts with structlog's console format on stdout)."""
    from gateway.cli.serve_cmd import configure_logging, exit_when_held
    from gateway.server import serve

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor turns Ctrl-C into SIGTERM
    configure_logging(worker=worker)

    def ready(_addr: str) -> None:
        link.send(("ready", ""))

    try:
        asyncio.run(serve(config, address, ready=ready, worker=worker, closed=exit_when_held))
    except Exception as exc:
        try:
            link.send(("error", f"cannot start: {exc}"))
        except OSError:
            pass
        raise SystemExit(2) from exc
