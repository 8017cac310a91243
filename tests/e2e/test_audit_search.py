"""``toolgate audit search`` over the log a real gateway wrote, and ``audit verify`` of several logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.audit import AuditLog
from gateway.audit_search import Criteria
from gateway.cli import main
from tests.conftest import Client

GLOBEX_KEY = "other-tenant-key"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "audit", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def _lines(out: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture
async def log(gateway, client) -> dict:
    """Calls by two agents of two tenants: an executed read, a denied delete, an invalid call."""
    other = Client(gateway.address, GLOBEX_KEY)
    try:
        ok = await client.call("echo", '{"a": 1}')
        denied = await client.call("delete_file", '{"path": "notes/x.txt"}')
        invalid = await client.call("read_file", '{"path": 7}')
        theirs = await other.call("echo", '{"b": 2}')
    finally:
        await other.close()
    assert (ok.code, denied.code, invalid.code, theirs.code) == ("ok", "policy_denied", "invalid_arguments", "ok")
    gateway.app.audit.flush()
    return {"path": gateway.app.config.audit_path, "ok": ok.decision_id, "denied": denied.decision_id,
            "invalid": invalid.decision_id, "theirs": theirs.decision_id}


def test_an_agents_calls_are_found_whole(log):
    out = _cli("search", log["path"], "--agent", "demo-agent")
    assert out.returncode == 0, out.stderr
    records = _lines(out)
    ids = {r["decision_id"] for r in records}
    assert ids == {log["ok"], log["denied"], log["invalid"]}
    executed = [r["stage"] for r in records if r["decision_id"] == log["ok"]]
    assert executed == ["authorized", "result"]  # the later record matched through its decision id
    assert "4 of 6 records matched" in out.stderr


def test_code_tenant_tool_and_decision_filters(log):
    denied = _lines(_cli("search", log["path"], "--code", "policy_denied"))
    assert [r["decision_id"] for r in denied] == [log["denied"]]
    theirs = _lines(_cli("search", log["path"], "--tenant", "globex", "--tool", "echo"))
    assert {r["decision_id"] for r in theirs} == {log["theirs"]}
    one = _lines(_cli("search", log["path"], "--decision-id", log["invalid"], "--steps"))
    stages = [s["stage"] for s in one]
    assert stages[:3] == ["authenticate", "resolve", "validate"] and one[2]["code"] == "invalid_arguments"
    assert all(s["decision_id"] == log["invalid"] for s in one)


def test_nothing_matched_exits_1_and_a_missing_file_exits_2(log):
    later = _cli("search", log["path"], "--since", "2999-01-01")
    assert later.returncode == 1 and later.stdout == "" and "0 of" in later.stderr
    assert _cli("search", log["path"].parent / "nope.jsonl").returncode == 2
    bad_time = _cli("search", log["path"], "--since", "yesterday-ish")
    assert bad_time.returncode == 2 and "ISO 8601" in bad_time.stderr


def test_several_logs_are_merged_in_time_order_and_broken_lines_skipped(tmp_path: Path):
    a, b = AuditLog(tmp_path / "audit.w0.jsonl"), AuditLog(tmp_path / "audit.w1.jsonl")
    for i, log_ in enumerate((a, b, a, b)):
        log_.record("result", decision_id=f"d{i}", code="ok", tool="echo")
        log_.flush()
    a.close()
    b.close()
    with open(tmp_path / "audit.w1.jsonl", "a") as f:
        f.write('{"not": "a rec')
    out = _cli("search", tmp_path / "audit.w0.jsonl", tmp_path / "audit.w1.jsonl", "--tool", "echo")
    assert [r["decision_id"] for r in _lines(out)] == ["d0", "d1", "d2", "d3"]
    assert "audit.w1.jsonl:3" in out.stderr
    verify = _cli("verify", tmp_path / "audit.w0.jsonl", tmp_path / "audit.w1.jsonl")
    assert verify.returncode == 1
    assert "audit.w0.jsonl: ok: 2 records" in verify.stdout
    assert "audit.w1.jsonl: BROKEN at line 3" in verify.stdout


@pytest.mark.parametrize("window", [
    ("--since", "nan"), ("--since", "inf"), ("--until", "-inf"), ("--until", "NaN"), ("--since", "1e999"),
], ids=["since-nan", "since-inf", "until-minus-inf", "until-NaN", "since-overflow"])
def test_a_time_that_is_not_finite_is_refused(tmp_path: Path, capsys, window) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, gateway_id="g")
    log.record("result", decision_id="d-1", code="ok", tool="echo")
    log.close()
    capsys.readouterr()
    code = main(["audit", "search", str(path), "=".join(window)])  # --until=-inf: not an option of its own
    out = capsys.readouterr()
    assert code == 2 and out.out == "", out.out  # nothing matched "everything"
    assert out.err.startswith(f"toolgate: invalid_time: {window[0]} '{window[1]}' is not a finite time"), out.err


def test_search_criteria_refuse_a_time_that_is_not_finite() -> None:
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="finite"):
            Criteria(since=bad)
        with pytest.raises(ValueError, match="finite"):
            Criteria(until=bad)
