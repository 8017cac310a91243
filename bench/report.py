"""Derived figures (ratios against the same run's echo baseline), budgets and the table."""

from __future__ import annotations

import math
import statistics
from typing import Any

GATEWAY_SCENARIOS = ("allow", "deny", "invalid", "opa_allow")


def _median(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
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
            row["throughput_ratio"] = _median([r["throughput"] / b["throughput"] for r, b in pairs])
            row["added_p50_ms"] = _median([r["p50_ms"] - b["p50_ms"] for r, b in pairs])
            row["added_p99_ms"] = _median([r["p99_ms"] - b["p99_ms"] for r, b in pairs])
            row["cpu_ratio"] = _median([r["cpu_us_per_call"] / b["cpu_us_per_call"] for r, b in pairs if b["cpu_us_per_call"]])
            out[name][c] = row
    return out


def budgets(derived: dict[str, Any], micro: dict[str, Any], hol: dict[str, Any] | None,
            memory: dict[str, Any] | None, opa_runs: dict[str, list[dict[str, float]]] | None) -> list[dict[str, Any]]:
    """Each budget of DESIGN.md with its measured value and PASS / FAIL / NOT MEASURED."""
    allow32 = derived.get("allow", {}).get("32", {})
    rows = [
        ("allow throughput / echo @32", allow32.get("throughput_ratio"), ">=", 0.40, "x"),
        ("allow added p50 @32", allow32.get("added_p50_ms"), "<=", 1.0, "ms"),
        ("allow added p99 @32", allow32.get("added_p99_ms"), "<=", 5.0, "ms"),
        ("embedded decision p50", micro.get("policy_decision_us"), "<=", 50.0, "us"),
        ("OPA added p50 over embedded @1", _opa_added(derived, opa_runs), "<=", 0.5, "ms"),
        ("fast call during 1000 slow / idle p50", hol.get("ratio_p50") if hol else None, "<=", 2.0, "x"),
        ("RSS after N calls / after 1k", memory.get("rss_ratio") if memory else None, "<=", 1.25, "x"),
        ("RSS growth, 2nd half of N calls", memory.get("second_half_growth_mb") if memory else None, "<=",
         memory.get("second_half_limit_mb") if memory else 0.0, "MB"),
    ]
    result = []
    for name, value, op, limit, unit in rows:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            verdict = "NOT MEASURED"
        else:
            verdict = "PASS" if (value >= limit if op == ">=" else value <= limit) else "FAIL"
        result.append({"budget": name, "value": value, "op": op, "limit": limit, "unit": unit, "verdict": verdict})
    return result


def _opa_added(derived: dict[str, Any], opa_runs: Any) -> float | None:
    if "opa_allow" not in derived:
        return None
    return derived["opa_allow"]["1"]["p50_ms"] - derived["allow"]["1"]["p50_ms"]


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def table(results: dict[str, Any]) -> str:
    """The human-readable summary printed at the end of a run (also pasted into README)."""
    lines = [
        f"rounds={results['rounds']}  seconds/run={results['seconds']}  quick={results['quick']}  "
        f"(medians over rounds; ratios and 'added' against echo in the same round)",
        "",
        "| scenario | conc | calls/s | x echo | p50 ms | p99 ms | added p50 | added p99 | server CPU us/call | x echo CPU | errors |",
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
    lines += ["", "| micro-figure (p50 per op) | us |", "|---|---:|"]
    for name, value in results["micro"].items():
        lines.append(f"| {name} | {_fmt(value) if value is not None else 'not measured'} |")
    hol = results.get("head_of_line")
    if hol:
        lines += ["", f"head-of-line: {hol['slow_ok']}/{hol['slow_calls']} slow calls ok in {hol['slow_wall_s']:.2f} s; "
                  f"fast call p50 idle {hol['idle_p50_ms']:.2f} ms, during {hol['during_p50_ms']:.2f} ms "
                  f"(p99 {hol['during_p99_ms']:.2f} ms, {hol['during_samples']} samples) = {hol['ratio_p50']:.2f}x"]
    mem = results.get("memory")
    if mem:
        lines += [f"memory: RSS {mem['rss_1k_mb']:.1f} MB after 1k calls, {mem['rss_half_mb']:.1f} MB after "
                  f"{mem['calls'] // 2:,}, {mem['rss_n_mb']:.1f} MB after {mem['calls']:,} = {mem['rss_ratio']:.3f}x"]
    lines += ["", "| budget | measured | limit | verdict |", "|---|---:|---:|---|"]
    for b in results["budgets"]:
        lines.append(f"| {b['budget']} | {_fmt(b['value'])} {b['unit']} | {b['op']} {_fmt(b['limit'])} {b['unit']} | {b['verdict']} |")
    return "\n".join(lines)
