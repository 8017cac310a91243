"""``python -m bench [--quick] [--rounds N] [--out FILE] [--profile]`` — see bench/README.md."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import grants, load, micro, paced, report
from bench.procs import OPAProcess, ServerProcess, opa_binary, opa_engine_available
from bench.scenarios import REPO, SCENARIOS, gateway_config

CONCURRENCY = (1, 32, 256)
OPEN_LOOP_CALLERS = 32
_T0 = time.monotonic()


def progress(message: str) -> None:
    print(f"[{time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive whole number (1 or more)")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:  # NaN too: it compares false
        raise argparse.ArgumentTypeError(f"{text} is not a fraction above 0 and at most 1 (0.5 is half)")
    return value


_DESCRIPTION = """\
toolgate's benchmark harness (issue F). Starts its own servers (a bare gRPC echo, the gateway
on the embedded engine and, when an OPA binary is found, on an OPA server), measures every
scenario against echo in the same round, prints progress to stderr and a Markdown table to
stdout, and writes the results as JSON. See bench/README.md for what each figure means."""

_EPILOG = """\
exit status: 0 when every budget passes, 1 when one fails, 2 for options that cannot run
(checked before any server starts, the output file's folder included)."""


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds of 1 s and a 20k-call memory probe (about 3 minutes; a full run about 12)")
    parser.add_argument("--rounds", type=_positive_int, default=None,
                        help="rounds per scenario (default 3 with --quick, else 5)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "latest.json"),
                        help="JSON results file, replaced whole once the run ends (default: bench/results/latest.json)")
    parser.add_argument("--profile", action="store_true",
                        help="only profile the allow path at concurrency 32 (pyinstrument) into bench/results/")
    parser.add_argument("--workers", type=_positive_int, default=None,
                        help="server processes for echo and the gateway alike (default: 2 on 2+ CPUs, else 1)")
    parser.add_argument("--channels", type=_positive_int, default=None,
                        help="client connections per load run (default: 1 for one worker, 8 per worker otherwise)")
    parser.add_argument("--open-loop-fraction", type=_fraction, default=0.5,
                        help="open-loop send rate as a fraction of allow's closed-loop throughput at 32 callers "
                             "(above 0, at most 1; default %(default)s)")
    args = parser.parse_args(argv)
    if not args.profile:
        try:
            _check_writable(Path(args.out))
        except OSError as exc:
            parser.error(f"--out {args.out}: the results could not be written there ({exc.strerror or exc})")
    return args


def _check_writable(out: Path) -> None:
    """Raise ``OSError`` unless a results file can be written at ``out`` (made folders stay):
    found before a run of minutes, not after it."""
    if out.is_dir():
        raise IsADirectoryError(errno.EISDIR, "it is a folder", str(out))
    existing = next(folder for folder in out.absolute().parents if folder.exists())
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file, not a folder", str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".check"):
        pass


def _write_results(out: Path, text: str) -> None:
    """``text`` into ``out`` whole or not at all: a run that fails while writing leaves the old file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # its mode as the umask says, like the file it replaces
    try:
        with open(tmp, "w") as f:  # a leftover of a crashed run with this pid is overwritten
            f.write(text)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Servers:
    """The server children of one run; all stopped on exit."""

    def __init__(self, workdir: Path, workers: int = 1) -> None:
        self.workdir = workdir
        self.workers = workers
        self.started: list[Any] = []

    def gateway(self, name: str, *, workers: int = 0, **config: Any) -> ServerProcess:
        data = self.workdir / name
        proc = ServerProcess("gateway", data, config=gateway_config(data / "data", **config), workers=workers or self.workers)
        return self._keep(proc.start())

    def echo(self) -> ServerProcess:
        return self._keep(ServerProcess("echo", self.workdir / "echo", workers=self.workers).start())

    def _keep(self, proc: Any) -> Any:
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()


async def _rounds(servers: Servers, procs: dict[str, ServerProcess], rounds: int, seconds: float, warmup: float,
                  fraction: float) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Each round: every closed-loop scenario at each concurrency, the OPA and embedded paths
    interleaved at one caller, then the open-loop pair."""
    names = [n for n, s in SCENARIOS.items() if s.server in procs]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {n: {str(c): [] for c in CONCURRENCY} for n in names}
    paced_runs: dict[str, list[dict[str, float]]] = {"echo": [], "allow": []}
    opa_interleaved: list[dict[str, Any]] = []
    for r in range(rounds):
        for c in CONCURRENCY:
            for name in names:
                res, extra = await _closed_loop(servers, procs, runs, name, r, c, seconds, warmup)
                runs[name][str(c)].append(res.as_dict() | extra)
                progress(f"round {r + 1}/{rounds} c={c:<3} {name:<9} {res.throughput:8.0f}/s p50 {res.p50_ms:6.2f} ms "
                         f"p99 {res.p99_ms:6.2f} ms cpu {res.cpu_us_per_call:5.0f} us/call errors {res.errors}")
        if "opa" in procs:
            embedded, opa = await load.interleaved([(procs["embedded"].address, SCENARIOS["allow"]),
                                                    (procs["opa"].address, SCENARIOS["opa_allow"])], seconds, warmup)
            opa_interleaved.append({"allow": embedded, "opa_allow": opa, "added_p50_ms": opa["p50_ms"] - embedded["p50_ms"]})
            progress(f"round {r + 1}/{rounds} interleaved @1: allow p50 {embedded['p50_ms']:6.2f} ms, opa_allow p50 "
                     f"{opa['p50_ms']:6.2f} ms, added {opa['p50_ms'] - embedded['p50_ms']:5.2f} ms, "
                     f"errors {embedded['errors'] + opa['errors']}")
        rate = fraction * runs["allow"][str(OPEN_LOOP_CALLERS)][-1]["throughput"]
        for name, server in (("echo", procs["echo"]), ("allow", procs["embedded"])):
            paced_res = await paced.open_loop(server.address, SCENARIOS[name], OPEN_LOOP_CALLERS, rate, seconds, warmup,
                                              server.cpu)
            paced_runs[name].append(paced_res.as_dict())
            progress(f"round {r + 1}/{rounds} open loop {name:<5} {rate:5.0f}/s scheduled: p50 {paced_res.p50_ms:6.2f} ms "
                     f"p99 {paced_res.p99_ms:6.2f} ms send lag p99 {paced_res.send_lag_p99_ms:5.2f} ms "
                     f"errors {paced_res.errors}")
    open_loop = {
        "callers": OPEN_LOOP_CALLERS, "rate_fraction_of_allow_capacity": fraction,
        "rate_per_s_by_round": [r["rate_per_s"] for r in paced_runs["allow"]],
        "seconds": seconds, "warmup": warmup, "rounds": rounds,
        "derived": report.derive_open_loop(paced_runs), "runs": paced_runs,
    }
    return runs, open_loop, opa_interleaved


async def _closed_loop(servers: Servers, procs: dict[str, ServerProcess], runs: dict[str, Any], name: str, r: int,
                       c: int, seconds: float, warmup: float) -> tuple[load.RunResult, dict[str, Any]]:
    if name != "grant":
        server = procs[SCENARIOS[name].server]
        return await load.closed_loop(server.address, SCENARIOS[name], c, seconds, warmup, server.cpu), {}
    supply = grants.supply_for(runs, c, seconds, warmup)  # on its own fresh gateway, see bench.grants
    res, extra = await grants.run(lambda: servers.gateway(f"grant-{r}-{c}"), c, seconds, warmup, supply)
    progress(f"grant: {extra['grants_made']} grants made in {extra['mint_seconds']:.1f} s before the run, "
             f"{extra['grants_unused']} left unused")
    return res, extra


async def _memory(servers: Servers, calls: int) -> dict[str, Any]:
    gw = servers.gateway("memory", workers=1)
    allow = SCENARIOS["allow"]
    errors = await load.counted(gw.address, allow, 1000)
    rss_1k = gw.rss()
    progress(f"memory: {rss_1k / 2**20:.1f} MB after 1,000 calls; sending {calls - 1000:,} more")
    errors += await load.counted(gw.address, allow, calls // 2 - 1000)
    rss_half = gw.rss()
    errors += await load.counted(gw.address, allow, calls - calls // 2)
    rss_n = gw.rss()
    gw.stop()
    mb = 2**20
    return {
        "calls": calls, "errors": errors, "rss_1k_mb": rss_1k / mb, "rss_half_mb": rss_half / mb, "rss_n_mb": rss_n / mb,
        "rss_ratio": rss_n / rss_1k, "second_half_growth_mb": (rss_n - rss_half) / mb,
        # a leak grows linearly; allocator and cache warm-up does not keep growing in the second half
        "second_half_limit_mb": max(2.0, 0.05 * rss_1k / mb),
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    rounds = args.rounds or (3 if quick else 5)
    seconds, warmup = (1.0, 0.3) if quick else (3.0, 0.5)
    workdir = Path(tempfile.mkdtemp(prefix="toolgate-bench-"))
    workers = args.workers or (2 if _cpus() >= 2 else 1)
    load.CHANNELS = args.channels or (1 if workers == 1 else 8 * workers)
    servers = Servers(workdir, workers)
    progress(f"layout: {workers} server process(es) for echo and gateway alike, {load.CHANNELS} client connection(s)")
    not_measured: dict[str, str] = {}
    try:
        progress("micro-figures (in-process)")
        micro_figures, micro_ranges = micro.measure(2000 if quick else 10000, rounds)
        progress("starting echo and embedded gateway servers")
        procs = {"echo": servers.echo(), "embedded": servers.gateway("embedded")}
        binary = opa_binary()
        if not opa_engine_available():
            not_measured["opa_allow"] = "policies.opa (engine: opa) is not in the tree yet"
        elif binary is None:
            not_measured["opa_allow"] = "no OPA binary (set TOOLGATE_OPA)"
        else:
            opa = servers._keep(OPAProcess(binary, workdir / "opa").start())
            procs["opa"] = servers.gateway("opa", engine="opa", opa_url=opa.url)
        runs, open_loop, opa_interleaved = await _rounds(servers, procs, rounds, seconds, warmup,
                                                         args.open_loop_fraction)
        for name in list(procs):
            procs.pop(name).stop()
        progress("head-of-line: 1,000 calls sleeping 1 s and a fast call, on one gateway process")
        hol = await load.head_of_line(servers.gateway("head-of-line", workers=1).address)
        progress(f"head-of-line: fast p50 idle {hol['idle_p50_ms']:.2f} ms, during {hol['during_p50_ms']:.2f} ms")
        servers.stop_all()
        memory = await _memory(servers, 20_000 if quick else 100_000)
        progress(f"memory: {memory['rss_1k_mb']:.1f} MB -> {memory['rss_n_mb']:.1f} MB after {memory['calls']:,} calls")
    finally:
        servers.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    derived = report.derive(runs)
    results = {
        "quick": quick, "rounds": rounds, "seconds": seconds, "warmup": warmup, "concurrency": list(CONCURRENCY),
        "workers": workers, "channels": load.CHANNELS,
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": _cpus()},
        "derived": derived, "open_loop": open_loop, "micro": micro_figures, "micro_rounds_range": micro_ranges,
        "head_of_line": hol, "memory": memory, "opa_interleaved": opa_interleaved,
        "not_measured": not_measured, "runs": runs,
    }
    results["budgets"] = report.budgets(derived, micro_figures, hol, memory, open_loop, runs=runs,
                                        micro_ranges=micro_ranges, opa_interleaved=opa_interleaved)
    return results


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


async def _profile(seconds: float = 15.0) -> None:
    out = REPO / "bench" / "results" / "profile_allow.txt"
    workdir = Path(tempfile.mkdtemp(prefix="toolgate-bench-profile-"))
    gw = ServerProcess("gateway", workdir, config=gateway_config(workdir / "data"), profile=str(out)).start()
    try:
        progress(f"profiling the allow path at concurrency 32 for {seconds:g} s")
        res = await load.closed_loop(gw.address, SCENARIOS["allow"], 32, seconds, 1.0, gw.cpu)
        progress(f"{res.throughput:.0f}/s under the profiler (slower than unprofiled)")
    finally:
        gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    progress(f"profile written to {out.relative_to(REPO)}")


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.profile:
        asyncio.run(_profile())
        return
    results = asyncio.run(_run(args))
    out = Path(args.out)
    print(report.table(results))  # first: the table is there even if the file cannot be written now
    _write_results(out, json.dumps(results, indent=1, sort_keys=True))
    progress(f"results written to {out}")
    if any(b["verdict"] == "FAIL" for b in results["budgets"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
