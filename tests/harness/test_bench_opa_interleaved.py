"""The benchmark's OPA figures (issue F): the interleaved run against real gRPC servers on
127.0.0.1, and the budget rows the report makes of it. The harness itself runs for minutes and
is not part of the test suite; these hold the pieces a verdict is computed from."""

from __future__ import annotations

import math

from bench import load, report
from bench.scenarios import ARGS, Scenario
from bench.server import _start_echo

ECHO = Scenario("echo", "echo", "noop", ARGS, "ok")
WRONG = Scenario("echo", "echo", "noop", ARGS, "policy_denied")  # echo answers "ok": every call an error


async def test_one_caller_alternates_between_the_targets_and_counts_each_ones_errors():
    first, first_port, _ = await _start_echo()
    second, second_port, _ = await _start_echo()
    try:
        a, b = await load.interleaved([(f"127.0.0.1:{first_port}", ECHO), (f"127.0.0.1:{second_port}", WRONG)],
                                      seconds=0.4, warmup=0.1)
    finally:
        await first.stop(0)
        await second.stop(0)
    assert a["calls"] > 10 and abs(a["calls"] - b["calls"]) <= 1  # one call to each per turn
    assert a["errors"] == 0
    assert b["errors"] >= b["calls"] > 0  # warm-up calls count as errors too, only timed ones as calls
    assert 0 < a["p50_ms"] <= a["p99_ms"] and 0 < b["p50_ms"] <= b["p99_ms"]


def _runs(added_separately: list[float]) -> dict[str, dict[str, list[dict[str, float]]]]:
    return {"allow": {"1": [{"p50_ms": 2.0} for _ in added_separately]},
            "opa_allow": {"1": [{"p50_ms": 2.0 + a} for a in added_separately]}}


def _row(rows: list[dict], suffix: str) -> dict:
    (row,) = [r for r in rows if r["budget"] == f"OPA added p50 over embedded @1, {suffix}"]
    return row


def _budgets(runs: dict, interleaved: list[dict] | None) -> list[dict]:
    return report.budgets({}, {}, None, None, None, runs=runs, opa_interleaved=interleaved)


def test_both_opa_rows_carry_their_own_median_range_and_verdict():
    interleaved = [{"added_p50_ms": v} for v in (0.61, 0.79, 0.29, 0.84, 0.61)]
    rows = _budgets(_runs([-0.58, 0.48, 1.13]), interleaved)
    separate, mixed = _row(rows, "separate runs"), _row(rows, "interleaved")
    assert (separate["verdict"], mixed["verdict"]) == ("PASS", "FAIL")
    assert math.isclose(separate["value"], 0.48) and math.isclose(mixed["value"], 0.61)
    assert mixed["rounds_range"] == (0.29, 0.84) and math.isclose(separate["rounds_range"][0], -0.58)
    assert mixed["limit"] == separate["limit"] == 0.5


def test_without_an_opa_server_neither_row_passes():
    rows = _budgets({"allow": {"1": [{"p50_ms": 2.0}]}}, [])
    assert {_row(rows, s)["verdict"] for s in ("separate runs", "interleaved")} == {"NOT MEASURED"}


def test_a_round_that_timed_nothing_is_left_out_of_the_median_and_the_range():
    rows = _budgets(_runs([0.3]), [{"added_p50_ms": float("nan")}, {"added_p50_ms": 0.4}, {"added_p50_ms": 0.2}])
    mixed = _row(rows, "interleaved")
    assert math.isclose(mixed["value"], 0.3) and mixed["rounds_range"] == (0.2, 0.4) and mixed["verdict"] == "PASS"
    only_nan = _row(_budgets(_runs([0.3]), [{"added_p50_ms": float("nan")}]), "interleaved")
    assert only_nan["verdict"] == "NOT MEASURED"
