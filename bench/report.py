"""Derived figures (ratios against the same run's echo baseline), budgets and the table."""

from __future__ import annotations

import math
import statistics
from typing import Any

GATEWAY_SCENARIOS = ("allow", "deny", "invalid", "opa_allow", "grant")


def _kept(values: list[float]) -> list[float]:
    """The values that were measured (neither None nor NaN)."""
    return [v for v in values if v is not None and not math.isnan(v)]


def _median(values: list[float]) -> float:
    values = _kept(values)
    return statistics.median(values) if values else float("nan")


def derive(runs: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per scenario and concurrency: medians over rounds, each ratio computed per round first."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, by_c in runs.items():
        out[name] = {}
        for c, rounds in by_c.items():
            base = runs["echo"][c]
            pairs = list(zip(rounds, base))
            row = {k: _median([r[k] for r in rounds]) for k in rounds[0]}
            row["errors"] = sum(r["errors"] for r in rounds)  # every failed call of every round
            _per_round(row, "throughput_ratio", [r["throughput"] / b["throughput"] for r, b in pairs])
            _per_round(row, "added_p50_ms", [r["p50_ms"] - b["p50_ms"] for r, b in pairs])
            _per_round(row, "added_p99_ms", [r["p99_ms"] - b["p99_ms"] for r, b in pairs])
            row["cpu_ratio"] = _median([r["cpu_us_per_call"] / b["cpu_us_per_call"] for r, b in pairs if b["cpu_us_per_call"]])
            out[name][c] = row
    return out


def derive_open_loop(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Medians over rounds of the paced runs; ``added_*`` against echo in the same round."""
    out = {}
    for name, rounds in runs.items():
        pairs = list(zip(rounds, runs["echo"]))
        row = {k: _median([r[k] for r in rounds]) for k in rounds[0]}
        row["errors"] = sum(r["errors"] for r in rounds)
        _per_round(row, "added_p50_ms", [r["p50_ms"] - b["p50_ms"] for r, b in pairs])
        _per_round(row, "added_p99_ms", [r["p99_ms"] - b["p99_ms"] for r, b in pairs])
        out[name] = row
    return out


def _per_round(row: dict[str, Any], name: str, values: list[float]) -> None:
    """``row[name]``: the median of a figure taken per round; ``row[name + "_range"]``: its
    lowest and highest round, so a reader sees how far one run's rounds spread."""
    row[name] = _median(values)
    kept = _kept(values)
    row[name + "_range"] = [min(kept), max(kept)] if kept else None


def budgets(derived: dict[str, Any], micro: dict[str, Any], hol: dict[str, Any] | None,
            memory: dict[str, Any] | None, open_loop: dict[str, Any] | None, *,
            runs: dict[str, Any] | None = None,
            micro_ranges: dict[str, tuple[float, float]] | None = None,
            opa_interleaved: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each budget of DESIGN.md with its measured value and PASS / FAIL / NOT MEASURED.

    The added-latency budget at 32 callers is reported twice: closed loop (saturation, where
    latency ≈ callers / throughput, see bench/README.md) and open loop (paced at a fixed
    fraction of allow's capacity, the meaningful latency figure). So is the OPA path's added
    p50, both per round: from the two closed-loop runs at one caller (seconds apart), and from
    one caller interleaving the two paths call by call (``bench.load.interleaved``)."""
    allow32 = derived.get("allow", {}).get("32", {})
    opa_added, opa_range = _opa_added(runs or {})
    opa_mixed, opa_mixed_range = _median_and_range([r["added_p50_ms"] for r in opa_interleaved or []])
    paced = (open_loop or {}).get("derived", {}).get("allow", {})
    at = f"paced at {open_loop['rate_fraction_of_allow_capacity']:.0%} of allow capacity" if open_loop else "paced"
    rows = [
        ("allow throughput / echo @32 callers, closed loop", allow32.get("throughput_ratio"), ">=", 0.40, "x",
         allow32.get("throughput_ratio_range")),
        ("allow added p50 @32 callers, closed loop (saturation)", allow32.get("added_p50_ms"), "<=", 1.0, "ms",
         allow32.get("added_p50_ms_range")),
        ("allow added p99 @32 callers, closed loop (saturation)", allow32.get("added_p99_ms"), "<=", 5.0, "ms",
         allow32.get("added_p99_ms_range")),
        (f"allow added p50 @32 callers, open loop ({at})", paced.get("added_p50_ms"), "<=", 1.0, "ms",
         paced.get("added_p50_ms_range")),
        (f"allow added p99 @32 callers, open loop ({at})", paced.get("added_p99_ms"), "<=", 5.0, "ms",
         paced.get("added_p99_ms_range")),
        ("embedded decision p50", micro.get("policy_decision_us"), "<=", 50.0, "us",
         (micro_ranges or {}).get("policy_decision_us")),
        ("OPA added p50 over embedded @1, separate runs", opa_added, "<=", 0.5, "ms", opa_range),
        ("OPA added p50 over embedded @1, interleaved", opa_mixed, "<=", 0.5, "ms", opa_mixed_range),
        ("fast call during 1000 slow / idle p50", hol.get("ratio_p50") if hol else None, "<=", 2.0, "x", None),
        ("RSS after N calls / after 1k", memory.get("rss_ratio") if memory else None, "<=", 1.25, "x", None),
        ("RSS growth, 2nd half of N calls", memory.get("second_half_growth_mb") if memory else None, "<=",
         memory.get("second_half_limit_mb") if memory else 0.0, "MB", None),
    ]
    result = []
    for name, value, op, limit, unit, spread in rows:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            verdict = "NOT MEASURED"
        else:
            verdict = "PASS" if (value >= limit if op == ">=" else value <= limit) else "FAIL"
        result.append({"budget": name, "value": value, "op": op, "limit": limit, "unit": unit, "verdict": verdict,
                       "rounds_range": spread})
    return result


def _opa_added(runs: dict[str, Any]) -> tuple[float | None, tuple[float, float] | None]:
    """The OPA path's p50 minus the embedded path's at one caller, per round: the median and
    the lowest and highest round."""
    if "opa_allow" not in runs:
        return None, None
    return _median_and_range([o["p50_ms"] - e["p50_ms"] for o, e in zip(runs["opa_allow"]["1"], runs["allow"]["1"])])


def _median_and_range(values: list[float]) -> tuple[float | None, tuple[float, float] | None]:
    """The median of per-round ``values`` and their lowest and highest; ``(None, None)`` for none."""
    kept = _kept(values)
    if not kept:
        return None, None
    return statistics.median(kept), (min(kept), max(kept))


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def table(results: dict[str, Any]) -> str:
    """The human-readable summary printed at the end of a run (also pasted into README)."""
    lines = [
        f"rounds={results['rounds']}  seconds/run={results['seconds']}  quick={results['quick']}  "
        f"(medians over rounds; ratios and 'added' against echo in the same round)",
        f"layout: echo and gateway each as {results.get('workers', 1)} server process(es) on one port, "
        f"client on {results.get('channels', 1)} connection(s); head-of-line and memory on one gateway process",
        "",
        "closed loop: each caller sends its next call as soon as the previous one answers "
        "(throughput at saturation; latency there is mostly queueing)",
        "",
        "| scenario | conc | calls/s | x echo | p50 ms | p99 ms | added p50 | added p99 | server CPU us/call | x echo CPU | "
        "errors (all rounds) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, by_c in results["derived"].items():
        for c, row in by_c.items():
            lines.append(
                f"| {name} | {c} | {_fmt(row['throughput'], 0)} | {_fmt(row['throughput_ratio'])} | {_fmt(row['p50_ms'])} | "
                f"{_fmt(row['p99_ms'])} | {_fmt(row['added_p50_ms'])} | {_fmt(row['added_p99_ms'])} | "
                f"{_fmt(row['cpu_us_per_call'], 0)} | {_fmt(row['cpu_ratio'])} | {int(row['errors'])} |"
            )
    for name, why in results.get("not_measured", {}).items():
        lines.append(f"| {name} | - | not measured: {why} | | | | | | | | |")
    lines += _grant_note(results["derived"].get("grant"), results["runs"].get("grant"))
    lines += _open_loop_table(results.get("open_loop"))
    lines += _interleaved_note(results.get("opa_interleaved"), results.get("seconds"))
    ranges = results.get("micro_rounds_range", {})
    lines += ["", "| micro-figure (median over rounds of each round's p50 per op) | us | rounds (lowest – highest) |",
              "|---|---:|---:|"]
    for name, value in results["micro"].items():
        spread = ranges.get(name)
        shown = f"{_fmt(spread[0])} – {_fmt(spread[1])}" if spread else ""
        lines.append(f"| {name} | {_fmt(value) if value is not None else 'not measured'} | {shown} |")
    hol = results.get("head_of_line")
    if hol:
        lines += ["", f"head-of-line: {hol['slow_ok']}/{hol['slow_calls']} slow calls ok in {hol['slow_wall_s']:.2f} s; "
                  f"fast call p50 idle {hol['idle_p50_ms']:.2f} ms, during {hol['during_p50_ms']:.2f} ms "
                  f"(p99 {hol['during_p99_ms']:.2f} ms, {hol['during_samples']} samples) = {hol['ratio_p50']:.2f}x"]
    mem = results.get("memory")
    if mem:
        lines += [f"memory: RSS {mem['rss_1k_mb']:.1f} MB after 1k calls, {mem['rss_half_mb']:.1f} MB after "
                  f"{mem['calls'] // 2:,}, {mem['rss_n_mb']:.1f} MB after {mem['calls']:,} = {mem['rss_ratio']:.3f}x"]
    lines += ["", "| budget | measured | rounds (lowest – highest) | limit | verdict |", "|---|---:|---:|---:|---|"]
    for b in results["budgets"]:
        spread = b.get("rounds_range")
        shown = f"{_fmt(spread[0])} – {_fmt(spread[1])}" if spread else ""
        lines.append(f"| {b['budget']} | {_fmt(b['value'])} {b['unit']} | {shown} | {b['op']} {_fmt(b['limit'])} {b['unit']} | "
                     f"{b['verdict']} |")
    return "\n".join(lines)


def _grant_note(grant: dict[str, dict[str, float]] | None, runs: dict[str, list[dict[str, float]]] | None) -> list[str]:
    if not grant or not runs:
        return []
    made = ", ".join(f"{_fmt(r.get('grants_made'), 0)} @{c}" for c, r in grant.items())
    cut = sum(int(r.get("exhausted", 0)) for rounds in runs.values() for r in rounds)
    total = sum(len(rounds) for rounds in runs.values())
    return ["", f"grant: each call presents its own grant, made before the run through the Approvals service "
            f"(median grants made per run: {made}); none is presented twice and a replayed answer counts as an "
            f"error; runs that used up their grants before the window ended: {cut}/{total}"]


def _interleaved_note(rounds: list[dict[str, Any]] | None, seconds: float | None) -> list[str]:
    if not rounds:
        return []
    def median(path: str, key: str) -> float:
        return _median([r[path][key] for r in rounds])
    added, spread = _median_and_range([r["added_p50_ms"] for r in rounds])
    errors = sum(int(r[p]["errors"]) for r in rounds for p in ("allow", "opa_allow"))
    return ["", f"OPA interleaved: one caller alternates allow calls between the embedded and the OPA gateway, "
            f"{seconds:g} s per round, {len(rounds)} rounds; p50 embedded {_fmt(median('allow', 'p50_ms'))} ms, "
            f"OPA {_fmt(median('opa_allow', 'p50_ms'))} ms, added {_fmt(added)} ms (rounds "
            f"{_fmt(spread[0]) if spread else '-'} – {_fmt(spread[1]) if spread else '-'}); "
            f"calls timed per path {_fmt(median('allow', 'calls'), 0)}; errors (all rounds) {errors}"]


def _open_loop_table(ol: dict[str, Any] | None) -> list[str]:
    if not ol:
        return []
    lines = [
        "", f"open loop: {ol['callers']} callers share a fixed schedule of sends at "
        f"{ol['rate_fraction_of_allow_capacity']:.0%} of allow's closed-loop throughput at {ol['callers']} callers in "
        f"the same round; latency from the scheduled send time (a call that waits for a free caller counts its wait); "
        f"{ol['seconds']:g} s per run, medians over {ol['rounds']} rounds, 'added' against echo at the same rate",
        "",
        "| scenario | scheduled/s | answered/s | p50 ms | p99 ms | added p50 | added p99 | service p50 ms | "
        "service p99 ms | send lag p99 ms | server CPU us/call | errors (all rounds) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in ol["derived"].items():
        lines.append(
            f"| {name} | {_fmt(r['rate_per_s'], 0)} | {_fmt(r['answered_per_s'], 0)} | {_fmt(r['p50_ms'])} | "
            f"{_fmt(r['p99_ms'])} | {_fmt(r['added_p50_ms'])} | {_fmt(r['added_p99_ms'])} | {_fmt(r['service_p50_ms'])} | "
            f"{_fmt(r['service_p99_ms'])} | {_fmt(r['send_lag_p99_ms'])} | {_fmt(r['cpu_us_per_call'], 0)} | "
            f"{int(r['errors'])} |"
        )
    return lines
