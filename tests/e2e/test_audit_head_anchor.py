"""The head names a record, not only a seq: a log that runs ahead of its head must still hold,
at the head's seq, the record the head names. Otherwise replacing the last records (their
hashes recomputed) and adding one more after them would pass ``audit verify``. Real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.audit import AuditLog, record_hash
from gateway.audit_verify import verify_file
from tests.conftest import write_audit_log


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 6)
    return path


def _rechained(path: Path, edit_line: int, extra: int, **changes: object) -> None:
    """Line ``edit_line`` changed, every hash from there on recomputed, ``extra`` records
    appended: what a tamperer who cannot write the head would do."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[edit_line - 1].update(changes)
    for i in range(extra):
        records.append({**records[-1], "decision_id": f"added-{i}", "seq": records[-1]["seq"] + 1})
    for i in range(edit_line - 1, len(records)):
        records[i]["prev_hash"] = records[i - 1]["hash"] if i else records[i]["prev_hash"]
        records[i]["hash"] = record_hash(records[i])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("edit_line", [6, 3], ids=["last-record", "earlier-record"])
def test_a_replaced_record_is_found_though_a_record_was_added_after_it(plain, edit_line):
    _rechained(plain, edit_line, 1, code="policy_denied")
    report = verify_file(plain)
    assert not report.ok and "not the one the head names" in report.reason, report
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "verify", str(plain)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "BROKEN" in out.stdout, out.stdout


def test_a_log_ahead_of_its_head_by_a_call_in_flight_verifies(plain):
    log = AuditLog(plain, gateway_id="test")
    log.record("authorized", decision_id="d6", code="ok")
    log.flush(anchor=False)  # the write-ahead record of a call, then the process dies
    assert json.loads(plain.with_name("audit.jsonl.head").read_text())["seq"] == 6
    report = verify_file(plain)
    assert report.ok and report.records == 7, report


def test_a_rotation_record_ahead_of_the_head_verifies(plain):
    renamed = plain.with_name("audit.jsonl.000000000006")
    os.rename(plain, renamed)
    log = AuditLog(plain, gateway_id="test")  # finishes the rotation: the head names seq 6 of the renamed file
    log.close()
    head = plain.with_name("audit.jsonl.head")
    last = json.loads(renamed.read_text().splitlines()[-1])
    head.write_text(json.dumps({"seq": 6, "hash": last["hash"]}))  # as if the stop came before the head moved
    assert verify_file(plain).ok
    head.write_text(json.dumps({"seq": 6, "hash": "sha256:" + "1" * 64}))
    assert not verify_file(plain).ok
