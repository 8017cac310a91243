"""Files that are not what ``audit search`` and ``audit verify`` expect get a clean answer, never
a traceback or a wait: a ``ts`` no float holds (a 400-digit integer) or not finite is a line that
is not a record; a log that cannot be read is ``audit_unreadable`` (exit 2); a head file that is
a FIFO (or a character device) or longer than a head is a broken head, and a gateway start on it
fails at once instead of waiting for a reader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.audit_verify import verify_file
from gateway.cli import main
from tests.conftest import write_audit_log


def test_a_time_no_float_holds_is_a_line_that_is_not_a_record(tmp_path: Path, capsys) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    with open(path, "a") as f:
        f.write('{"ts":' + "9" * 400 + ',"seq":3}\n{"ts":NaN,"seq":4}\n{"ts":-Infinity,"seq":5}\n')
    code = main(["audit", "search", str(path)])
    out = capsys.readouterr()
    assert code == 0 and len(out.out.splitlines()) == 2, out
    for line in (3, 4, 5):
        assert f"audit.jsonl:{line}" in out.err, out.err
    assert "Traceback" not in out.err


def _unreadable(tmp_path: Path) -> str:
    """A regular file this process cannot read: mode 000, or (root reads those) a write-only
    procfs file."""
    if os.geteuid() == 0:
        return "/proc/self/clear_refs"
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 1)
    path.chmod(0)
    return str(path)


def test_a_log_that_cannot_be_read_is_audit_unreadable(tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.jsonl"
    write_audit_log(good, 1)
    bad = _unreadable(tmp_path)
    code = main(["audit", "search", str(good), bad])
    err = capsys.readouterr().err
    assert code == 2 and f"toolgate: audit_unreadable: {bad} cannot be read: " in err, err
    assert "Traceback" not in err


def _verify_in_time(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "verify", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_a_head_that_is_a_fifo_is_broken_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    head = tmp_path / "audit.jsonl.head"
    head.unlink()
    os.mkfifo(head)
    out = _verify_in_time(path)  # it waited for a writer that never came
    assert out.returncode == 1 and "head file audit.jsonl.head: cannot be read: not a regular file" in out.stdout, out
    started = subprocess.run(  # the gateway's own start on that log: an error, at once
        [sys.executable, "-c", "import sys; from gateway.audit import AuditLog; AuditLog(sys.argv[1])", str(path)],
        capture_output=True, text=True, timeout=60)
    assert started.returncode != 0 and "audit.jsonl.head" in started.stderr, started  # ENXIO: no reader


def test_a_head_longer_than_a_head_is_broken_and_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    (tmp_path / "audit.jsonl.head").write_bytes(b" " * 5000)
    report = verify_file(path)
    assert not report.ok and "longer than a head" in report.reason, report
    (tmp_path / "audit.jsonl.head").unlink()
    (tmp_path / "audit.jsonl.head").symlink_to("/dev/zero")
    report = verify_file(path)
    assert not report.ok and "not a regular file" in report.reason, report


def test_search_skips_the_files_kept_beside_a_log_as_verify_does(tmp_path: Path, capsys) -> None:
    """``audit search audit.jsonl*`` read the log's head and lock files as logs and warned of
    "lines that are not audit records" in them."""
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 3)
    (tmp_path / "audit.jsonl.lock").write_text(f"{os.getpid()}\n")
    files = sorted(str(p) for p in tmp_path.glob("audit.jsonl*"))
    assert len(files) == 3  # the log, its head, its lock
    code = main(["audit", "search", *files])
    out = capsys.readouterr()
    assert code == 0 and len(out.out.splitlines()) == 3, out
    assert "not an audit record" not in out.err, out.err
    assert "skipped" in out.err and "audit.jsonl.head" in out.err and "audit.jsonl.lock" in out.err, out.err
