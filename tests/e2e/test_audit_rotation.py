"""Audit log rotation: each file verifies alone, consecutive files verify together, and a
missing or replaced file is found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

from gateway.audit import GENESIS, record_hash
from gateway.audit_verify import verify_file, verify_segments
from tests.conftest import Client, demo_config, write_audit_log
from gateway.testing import start_gateway


_write = partial(write_audit_log, rotate_bytes=1500)


def _files(path: Path) -> list[Path]:
    """The rotated files in order, then the active one."""
    return sorted(path.parent.glob(path.name + ".*[0-9]")) + [path]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_rotated_log_is_files_that_go_on_from_each_other(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 40)
    files = _files(path)
    assert len(files) >= 4
    for before, after in zip(files, files[1:]):
        first = _lines(after)[0]
        assert first["stage"] == "audit_rotated" and first["previous_file"] == before.name
        assert first["prev_hash"] == _lines(before)[-1]["hash"] and first["seq"] == _lines(before)[-1]["seq"] + 1
        assert before.name == f"audit.jsonl.{_lines(before)[-1]['seq']:012d}"
    assert all(verify_file(f).ok for f in files)
    assert all(report.ok for _, report in verify_segments(files))
    decisions = [r["decision_id"] for f in files for r in _lines(f) if r["stage"] == "result"]
    assert decisions == [f"d{i}" for i in range(40)]  # nothing lost, nothing twice


def test_a_missing_file_in_between_is_a_gap(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 40)
    files = _files(path)
    files[1].unlink()
    reports = dict(verify_segments([files[0], *files[2:]]))
    bad = reports[files[2]]
    assert not bad.ok and "are missing" in bad.reason, bad
    assert reports[files[0]].ok and reports[path].ok


def test_a_replaced_file_does_not_go_on_from_the_one_before(tmp_path):
    """The middle file rewritten with a consistent chain of its own (every hash recomputed)
    still verifies alone, but the next file no longer goes on from it."""
    path = tmp_path / "audit.jsonl"
    _write(path, 40)
    files = _files(path)
    records = _lines(files[1])
    prev = records[0]["prev_hash"]
    for rec in records:
        rec["n"] = -1
        rec["prev_hash"] = prev
        rec["hash"] = record_hash(rec)
        prev = rec["hash"]
    files[1].write_text("".join(json.dumps(r) + "\n" for r in records))
    assert verify_file(files[1]).ok
    reports = dict(verify_segments(files))
    assert not reports[files[2]].ok and "does not go on from" in reports[files[2]].reason


def test_a_file_may_start_after_seq_1_only_with_the_rotation_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 40)
    rotated = _files(path)[1]
    lines = rotated.read_text().splitlines(keepends=True)
    rotated.write_text("".join(lines[1:]))  # its audit_rotated record dropped
    report = verify_file(rotated)
    assert not report.ok and "follows" in report.reason


def test_a_stop_between_the_rename_and_the_first_record_is_finished_on_start(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 5, rotate_bytes=0)
    last = _lines(path)[-1]
    os.rename(path, tmp_path / f"audit.jsonl.{last['seq']:012d}")  # as rotate() does, then a crash
    _write(path, 3, rotate_bytes=0, start=5)
    first = _lines(path)[0]
    assert (first["stage"], first["seq"], first["prev_hash"]) == ("audit_rotated", last["seq"] + 1, last["hash"])
    assert all(r.ok for _, r in verify_segments(_files(path)))


def test_an_empty_log_without_a_renamed_file_starts_a_new_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 2, rotate_bytes=0)
    path.unlink()  # not a rotation: no audit.jsonl.<seq> beside it
    _write(path, 1, rotate_bytes=0)
    assert _lines(path)[0]["seq"] == 1 and _lines(path)[0]["prev_hash"] == GENESIS


async def test_a_gateway_rotates_between_calls_and_the_cli_verifies_the_files(tmp_path):
    config = demo_config(tmp_path)
    config = config.model_copy(update={"audit": config.audit.model_copy(update={"rotate_bytes": 4000})})
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        for i in range(12):
            assert (await client.call("echo", json.dumps({"i": i}))).code == "ok"
    finally:
        await client.close()
        await running.stop()
    path = config.audit_path
    files = _files(path)
    assert len(files) >= 3
    for f in files:  # rotation happens at the end of a call: its two records stay together
        stages = [r["stage"] for r in _lines(f)]
        assert stages[-1] != "authorized" and stages.count("authorized") == stages.count("result"), stages
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "verify", *map(str, files)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("chain intact") == len(files), out.stdout + out.stderr
    found = subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "search", *map(str, files), "--tool", "echo"],
                           capture_output=True, text=True, timeout=60)
    assert len({json.loads(x)["decision_id"] for x in found.stdout.splitlines()}) == 12
