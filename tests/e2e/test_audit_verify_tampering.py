"""``audit verify`` against a tamperer: emptied or cut files, a missing head, malformed and
ambiguous lines. Each is a BROKEN report naming the file and line, never a traceback, while a
new log and a rotation cut short by a stop still verify. And a rotation whose new file cannot
be opened stops the next call before its tool runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import grpc
import pytest

from gateway.audit import AuditLog, record_hash
from gateway.audit_verify import verify_file, verify_segments
from gateway.testing import calls_recorded, start_gateway
from tests.conftest import Client, demo_config, write_audit_log


_write = partial(write_audit_log, rotate_bytes=1500)


def _files(path: Path) -> list[Path]:
    """The rotated files in order, then the active one."""
    return sorted(path.parent.glob(path.name + ".*[0-9]")) + [path]


def _head(path: Path) -> Path:
    return path.with_name(path.name + ".head")


def _verify_cli(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "verify", *map(str, paths)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def rotated(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    _write(path, 40)
    assert len(_files(path)) >= 4
    return path


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    _write(path, 6, rotate_bytes=0)
    return path


# --- emptied and cut files of a rotated log ---------------------------------------------------


def test_an_emptied_rotated_file_in_between_is_found(rotated):
    files = _files(rotated)
    files[1].write_bytes(b"")  # its records gone, nothing else touched
    reports = dict(verify_segments(files))
    assert not reports[files[1]].ok and "its name says it ends at seq" in reports[files[1]].reason
    assert not reports[files[2]].ok and "are missing" in reports[files[2]].reason, reports[files[2]]
    assert reports[files[0]].ok and reports[rotated].ok
    out = _verify_cli(*files)
    assert out.returncode == 1 and f"{files[1].name}: BROKEN at line 1: empty" in out.stdout, out.stdout
    assert "Traceback" not in out.stderr


def test_a_rotated_file_cut_at_its_end_is_found_alone(rotated):
    victim = _files(rotated)[1]
    lines = victim.read_text().splitlines(keepends=True)
    victim.write_text("".join(lines[:-2]))  # whole records dropped: the rest still chains
    report = verify_file(victim)
    assert not report.ok and "but its name says seq" in report.reason, report


def test_an_emptied_active_log_with_its_head_deleted_is_found_when_rotated_files_exist(rotated):
    rotated.write_bytes(b"")
    _head(rotated).unlink()
    report = verify_file(rotated)
    assert not report.ok and "rotated files of it exist" in report.reason, report
    out = _verify_cli(rotated)
    assert out.returncode == 1 and f"{rotated}: BROKEN: empty" in out.stdout, out.stdout


def test_an_emptied_active_log_with_an_emptied_head_is_found_when_rotated_files_exist(rotated):
    rotated.write_bytes(b"")
    _head(rotated).write_bytes(b"")
    assert not verify_file(rotated).ok


def test_an_emptied_active_log_whose_head_remains_is_found(rotated):
    rotated.write_bytes(b"")
    report = verify_file(rotated)
    assert not report.ok and "its records were removed" in report.reason, report


# --- the head ---------------------------------------------------------------------------------


def test_a_log_without_its_head_is_broken(plain):
    _head(plain).unlink()
    out = _verify_cli(plain)
    assert out.returncode == 1 and "no head file (audit.jsonl.head is missing or empty)" in out.stdout, out.stdout


def test_a_log_with_an_empty_head_is_broken(plain):
    _head(plain).write_bytes(b"")
    report = verify_file(plain)
    assert not report.ok and "no head file" in report.reason, report


def test_a_head_before_the_log_begins_is_broken(rotated):
    _head(rotated).write_text(json.dumps({"seq": 1, "hash": "sha256:" + "0" * 64}))
    report = verify_file(rotated)
    assert not report.ok and "before this log begins" in report.reason, report


def test_a_new_log_verifies(tmp_path):
    gateway_made = tmp_path / "a.jsonl"
    AuditLog(gateway_made).close()  # started and stopped before any record
    assert _head(gateway_made).read_bytes().strip(), "the head is written when the log is opened"
    touched = tmp_path / "b.jsonl"
    touched.write_bytes(b"")  # no head at all
    out = _verify_cli(gateway_made, touched)
    assert out.returncode == 0 and out.stdout.count("ok: 0 records, chain intact") == 2, out.stdout


def test_a_crash_before_the_first_anchor_still_verifies(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record("authorized", code="ok")
    log.flush(anchor=False)  # write-ahead record, then the process dies: the head lags
    report = verify_file(path)
    assert report.ok and report.records == 1, report


def test_a_stop_mid_rotation_verifies_and_is_finished_on_start(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 5, rotate_bytes=0)
    renamed = tmp_path / "audit.jsonl.000000000005"
    os.rename(path, renamed)  # what rotate() does, then a stop before the new file exists
    path.write_bytes(b"")
    report = verify_file(path)
    assert report.ok and "rotation into audit.jsonl.000000000005 is not finished" in report.note, report
    out = _verify_cli(renamed, path)
    assert out.returncode == 0 and "is not finished" in out.stdout, out.stdout
    _write(path, 1, rotate_bytes=0)  # the gateway starts again
    assert all(r.ok for _, r in verify_segments([renamed, path]))
    assert json.loads(path.read_text().splitlines()[0])["stage"] == "audit_rotated"


def test_a_stop_mid_rotation_does_not_cover_a_newer_rotated_file(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, 40)
    files = _files(path)
    last = json.loads(files[-3].read_text().splitlines()[-1])  # an older rotated file's end
    path.write_bytes(b"")
    _head(path).write_text(json.dumps({"seq": last["seq"], "hash": last["hash"]}))
    assert not verify_file(path).ok


# --- malformed input: BROKEN with the line, never a traceback ---------------------------------


MALFORMED_HEADS = {
    "list": b"[]", "string": b'"x"', "null": b"null", "number": b"7", "seq-string": b'{"seq": "6", "hash": "h"}',
    "seq-bool": b'{"seq": true, "hash": "h"}', "no-hash": b'{"seq": 6}', "negative": b'{"seq": -1, "hash": "h"}',
    "float": b'{"seq": 6.0, "hash": "h"}', "not-utf8": b"\xff\xfe{", "deep": b"{" * 100_000,
    "duplicate-key": b'{"seq": 1, "hash": "h", "seq": 6}',
}
MALFORMED_LINES = {
    "not-utf8": b'{"seq": 3, "hash": "h", "prev_hash": "p", "x": "\xff"}', "deep": b"[" * 100_000,
    "seq-string": b'{"seq": "3", "hash": "h", "prev_hash": "p"}',
    "seq-float": b'{"seq": 3.0, "hash": "h", "prev_hash": "p"}',
    "hash-number": b'{"seq": 3, "hash": 1, "prev_hash": "p"}', "no-prev-hash": b'{"seq": 3, "hash": "h"}',
    "huge-int": b'{"seq": ' + b"9" * 5000 + b', "hash": "h", "prev_hash": "p"}',
    "lone-surrogate": b'{"seq": 3, "hash": "h", "prev_hash": "p", "x": "\\ud800"}',
}


def _with_line_3(path: Path, line: str | bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = (line.encode() if isinstance(line, str) else line) + b"\n"
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("head", MALFORMED_HEADS.values(), ids=MALFORMED_HEADS.keys())
def test_a_malformed_head_is_broken(plain, head):
    _head(plain).write_bytes(head)
    report = verify_file(plain)
    assert not report.ok and "audit.jsonl.head" in report.reason, report


@pytest.mark.parametrize("line", MALFORMED_LINES.values(), ids=MALFORMED_LINES.keys())
def test_a_malformed_line_is_broken_at_its_line(plain, line):
    _with_line_3(plain, line)
    report = verify_file(plain)
    assert not report.ok and report.line == 3, report


def test_the_cli_reports_every_malformed_file_without_a_traceback(tmp_path):
    logs = []
    for i, head in enumerate(MALFORMED_HEADS.values()):
        logs.append(tmp_path / f"head{i}.jsonl")
        _write(logs[-1], 4, rotate_bytes=0)
        _head(logs[-1]).write_bytes(head)
    for i, line in enumerate(MALFORMED_LINES.values()):
        logs.append(tmp_path / f"line{i}.jsonl")
        _write(logs[-1], 4, rotate_bytes=0)
        _with_line_3(logs[-1], line)
    out = _verify_cli(*logs)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.count(": BROKEN") == len(logs), out.stdout
    assert out.stdout.count(": BROKEN at line 3:") == len(MALFORMED_LINES), out.stdout


def test_a_head_that_cannot_be_read_is_broken(plain):
    _head(plain).unlink()
    _head(plain).mkdir()
    report = verify_file(plain)
    assert not report.ok and "cannot be read" in report.reason, report


def _rehashed(path: Path, **changes: object) -> dict:
    """Line 3 changed and its hash recomputed, as a tamperer would."""
    rec = json.loads(path.read_text().splitlines()[2])
    rec.update(changes)
    rec.pop("hash")
    return rec


def test_a_lone_surrogate_in_a_record_is_broken(plain):
    rec = _rehashed(plain)
    line = json.dumps(rec)[:-1] + ', "note": "\\ud800", "hash": "sha256:' + "0" * 64 + '"}'
    _with_line_3(plain, line)
    report = verify_file(plain)
    assert not report.ok and report.line == 3 and "lone surrogate" in report.reason, report


# --- duplicate keys ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["code", "seq"])
def test_a_key_given_twice_on_a_line_is_broken(plain, key):
    """The hash matches the last value (what json.loads keeps); a reader keeping the first
    would see another record, so the line is rejected."""
    rec = _rehashed(plain, code="ok")
    rec["hash"] = record_hash(rec)
    first = {"code": '"policy_denied"', "seq": "99"}[key]
    _with_line_3(plain, '{"' + key + '": ' + first + ", " + json.dumps(rec)[1:])
    report = verify_file(plain)
    assert not report.ok and report.line == 3 and f"key '{key}' appears twice" in report.reason, report


def test_a_key_given_twice_inside_a_step_is_broken(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    for i in range(4):
        log.record("result", decision_id=f"d{i}", code="ok", steps=[{"stage": "policy", "code": "ok"}])
    log.close()
    lines = path.read_text().splitlines()
    assert '{"code":"ok","stage":"policy"}' in lines[2]
    _with_line_3(path, lines[2].replace('{"code":"ok"', '{"code":"policy_denied","code":"ok"', 1))  # same hash
    report = verify_file(path)
    assert not report.ok and report.line == 3 and "key 'code' appears twice" in report.reason, report


# --- a rotation whose new file cannot be opened -----------------------------------------------


async def test_no_tool_runs_when_a_rotation_cannot_open_the_new_file(tmp_path, monkeypatch):
    config = demo_config(tmp_path)
    config = config.model_copy(update={"audit": config.audit.model_copy(update={"rotate_bytes": 1})})
    running = await start_gateway(config)
    path = config.audit_path
    sandbox = config.data_path / "sandbox"
    rename = os.rename

    def rename_then_block(src, dst, *args, **kwargs):  # as root a permission would not stop the open
        rename(src, dst, *args, **kwargs)
        if Path(src) == path:
            path.mkdir()  # opening the log's path for append now fails

    monkeypatch.setattr(os, "rename", rename_then_block)
    client = Client(running.address)
    try:
        first = await client.call("count_call", '{"n": 1}')
        assert first.code == "ok" and calls_recorded(sandbox, "count_call") == 1
        assert path.is_dir(), "the rotation after the first call was attempted"
        with pytest.raises(grpc.aio.AioRpcError):
            await client.call("count_call", '{"n": 2}')
        assert calls_recorded(sandbox, "count_call") == 1, "a tool ran with no audit record before it"
    finally:
        await client.close()
        await running.stop()
    renamed = _files(path)[:-1]
    assert len(renamed) == 1
    stages = [json.loads(x)["stage"] for x in renamed[0].read_text().splitlines()]
    assert config.audit.signing_key  # the demo config signs: the rotated file ends with its checkpoint
    assert stages[-3:] == ["authorized", "result", "audit_checkpoint"] and "count_call" in renamed[0].read_text()
    assert verify_file(renamed[0]).ok
