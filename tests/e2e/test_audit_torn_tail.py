"""A gateway starting on a log that a stop or a full disk left ending in a partial line: the
records written after the restart stay readable and the log verifies, and the partial line
is kept and named in the chain. Real files; the AuditLog the gateway opens."""

from __future__ import annotations

import subprocess
import sys

from gateway.audit_verify import verify_file, verify_segments
from tests.conftest import StoppedClock, audit_records, write_audit_log


def test_a_record_cut_mid_write_does_not_swallow_the_next_one(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 3)
    partial = b'{"code":"ok","decision_id":"d-3","seq":4,"sta'
    with open(path, "ab") as f:
        f.write(partial)  # the stop came mid-write: no end of line, and the head still says seq 3
    write_audit_log(path, 1)  # the gateway starts again, and one call is recorded
    records = audit_records(path)  # every line is a record: none glued onto the partial one
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    torn, call = records[3], records[4]
    assert (torn["stage"], torn["code"], torn["torn_bytes"]) == ("audit_restarted", "audit_log_torn", len(partial))
    assert call["decision_id"] == "d0"
    assert (tmp_path / torn["torn_file"]).read_bytes() == partial  # the evidence is kept
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "verify", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "5 records" in out.stdout, out.stdout


def test_a_rotation_record_cut_mid_write_is_finished_on_start(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 5)
    renamed = tmp_path / "audit.jsonl.000000000005"
    path.rename(renamed)
    path.write_bytes(b'{"code":"ok","stage":"audit_rot')  # the rotation record, cut mid-write
    write_audit_log(path, 1)
    stages = [r["stage"] for r in audit_records(path)]
    assert stages == ["audit_rotated", "audit_restarted", "result"]
    assert not list(tmp_path.glob("*.cut-*")), "a torn rotation record is not a log cut short"
    assert all(report.ok for _, report in verify_segments([renamed, path]))
    assert verify_file(path).ok


def test_a_second_torn_line_in_the_same_tick_keeps_the_first(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("gateway.audit.time", StoppedClock)
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    partials = [b'{"code":"ok","seq":3,"sta', b'{"code":"ok","seq":5,"stage":"ca']
    for partial in partials:
        with open(path, "ab") as f:
            f.write(partial)  # a stop mid-write
        write_audit_log(path, 0)  # the gateway starts again, on the same clock reading
    torn = [r for r in audit_records(path) if r["code"] == "audit_log_torn"]
    assert [(tmp_path / r["torn_file"]).read_bytes() for r in torn] == partials  # both kept, neither replaced
    assert verify_file(path).ok
