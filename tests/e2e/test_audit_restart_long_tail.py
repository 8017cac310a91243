"""A gateway starting on an intact log goes on from its last record however long that record is
(an ``audit: full`` call with large arguments can write one over 1 MiB), and reads lines as verify
does, split at ``\\n`` only: a last record over 1 MiB, or one holding a ``\\r`` (JSON whitespace),
was not found, and the intact log was set aside as cut and a new chain begun at seq 1."""

from __future__ import annotations

import json

from gateway.audit import AuditLog
from gateway.audit_verify import verify_file
from tests.conftest import audit_records, write_audit_log


def _restart_and_record(path) -> None:
    log = AuditLog(path, gateway_id="test")
    log.record("result", decision_id="after", code="ok", tool="echo")
    log.flush()
    log.close()


def test_a_last_record_over_a_mebibyte_is_gone_on_from(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    log = AuditLog(path, gateway_id="test")
    log.record("result", decision_id="big", code="ok", tool="echo", args_json="x" * (3 << 20))
    log.flush()
    log.close()
    _restart_and_record(path)
    assert not list(tmp_path.glob("audit.jsonl.cut-*")), "an intact log was set aside as cut"
    records = audit_records(path)
    assert [r["seq"] for r in records] == [1, 2, 3, 4] and records[-1]["decision_id"] == "after"
    assert verify_file(path).ok


def test_a_carriage_return_inside_the_last_record_is_whitespace(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 3)
    text = path.read_bytes()
    last = text.rstrip(b"\n").rpartition(b"\n")[2]
    path.write_bytes(text[:-len(last) - 1] + last.replace(b",", b",\r", 1) + b"\n")
    assert verify_file(path).ok  # the same record: JSON whitespace is not part of what is hashed
    _restart_and_record(path)
    assert not list(tmp_path.glob("audit.jsonl.cut-*")), "an intact log was set aside as cut"
    assert [json.loads(line)["seq"] for line in path.read_bytes().split(b"\n") if line] == [1, 2, 3, 4]
    assert verify_file(path).ok
