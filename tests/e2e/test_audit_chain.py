"""The audit chain verifies, and any edit, deletion, reordering or truncation is detected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.audit import AuditLog
from gateway.audit_verify import verify_file


def _verify_cli(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "audit", "verify", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, gateway_id="test")
    for i in range(6):
        audit.record("policy", decision_id=f"d{i}", code="ok", decision="allow", n=i)
        audit.flush()
    audit.close()
    return path


def test_an_untouched_log_verifies(log_file):
    out = _verify_cli(log_file)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6 records" in out.stdout


def test_a_gateway_audit_log_verifies_after_calls(tmp_path):
    audit = AuditLog(tmp_path / "a.jsonl")
    audit.record("x", code="ok")
    audit.close()
    again = AuditLog(tmp_path / "a.jsonl")  # a restart continues the chain
    again.record("y", code="ok")
    again.close()
    assert verify_file(tmp_path / "a.jsonl").ok


def _rewrite(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def test_editing_one_field_is_detected(log_file):
    lines = log_file.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["decision"] = "deny"
    lines[2] = json.dumps(rec, sort_keys=True, separators=(",", ":"))
    _rewrite(log_file, lines)
    out = _verify_cli(log_file)
    assert out.returncode == 1 and "line 3" in out.stdout and "edited" in out.stdout


def test_deleting_a_line_is_detected(log_file):
    lines = log_file.read_text().splitlines()
    del lines[3]
    _rewrite(log_file, lines)
    out = _verify_cli(log_file)
    assert out.returncode == 1 and "line 4" in out.stdout


def test_reordering_lines_is_detected(log_file):
    lines = log_file.read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    _rewrite(log_file, lines)
    out = _verify_cli(log_file)
    assert out.returncode == 1 and "line 2" in out.stdout


def test_dropping_the_last_records_is_detected_by_the_head(log_file):
    lines = log_file.read_text().splitlines()
    _rewrite(log_file, lines[:-2])
    out = _verify_cli(log_file)
    assert out.returncode == 1 and "truncated" in out.stdout


def test_a_partial_last_line_is_detected(log_file):
    data = log_file.read_bytes()
    log_file.write_bytes(data[:-10])
    out = _verify_cli(log_file)
    assert out.returncode == 1


def test_rehashing_an_edited_record_still_breaks_the_chain(log_file):
    from gateway.audit import record_hash

    lines = log_file.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["decision"] = "deny"
    rec["hash"] = record_hash(rec)
    lines[1] = json.dumps(rec)
    _rewrite(log_file, lines)
    report = verify_file(log_file)
    assert not report.ok and report.line == 3 and "prev_hash" in report.reason


def test_a_record_that_fails_to_write_leaves_the_chain_unbroken(tmp_path, monkeypatch):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.record("result", decision_id="d-1", code="ok")
    sink = log._sink
    write = sink.msg

    def full(line: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sink, "msg", full)
    with pytest.raises(OSError):
        log.record("result", decision_id="d-2", code="ok")
    monkeypatch.setattr(sink, "msg", write)
    log.record("result", decision_id="d-3", code="ok")
    log.close()
    report = verify_file(tmp_path / "audit.jsonl")
    assert report.ok and report.records == 2, report
