"""``toolgate audit verify audit.jsonl*``: the shell glob matches the files the gateway keeps
beside a log (its ``.head``, the ``.cut-*`` and ``.torn-*`` evidence set aside at a start); they
are skipped with the reason, not reported BROKEN nor counted, and a file given twice is
verified once, while every real segment is checked as before. Real files written by the
AuditLog the gateway opens; the CLI in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from tests.conftest import write_audit_log




def verify(capsys: pytest.CaptureFixture[str], *paths: object) -> tuple[int, list[str], str]:
    capsys.readouterr()  # not what the writer logged while making the files
    code = main(["audit", "verify", *map(str, paths)])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


@pytest.fixture
def log_with_evidence(tmp_path: Path) -> Path:
    """A log that was cut short once (evidence set aside), torn once, then rotated."""
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 6)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:3]))  # records removed
    write_audit_log(path, 2)  # set aside as .cut-*, a new chain begins
    with open(path, "ab") as f:
        f.write(b'{"code":"ok","sta')  # a stop mid-write
    write_audit_log(path, 30, rotate_bytes=1500)  # the partial line set aside as .torn-*; rotations
    names = {p.name for p in tmp_path.iterdir()}
    assert {"audit.jsonl", "audit.jsonl.head"} < names
    assert [n for n in names if ".cut-" in n] and [n for n in names if ".torn-" in n]
    assert len([n for n in names if n[len("audit.jsonl."):].isdigit()]) >= 2
    return path


def test_verify_of_a_glob_skips_the_files_kept_beside_the_log(capsys, log_with_evidence) -> None:
    files = sorted(log_with_evidence.parent.glob("audit.jsonl*"))
    code, lines, err = verify(capsys, *files)
    assert code == 0, "\n".join(lines) + err
    by_file = {line.split(": ", 1)[0]: line.split(": ", 2)[1] for line in lines}
    companions = {str(f) for f in files
                  if f.name.endswith((".head", ".lock")) or ".cut-" in f.name or ".torn-" in f.name}
    assert len(companions) == 5  # the head, the cut log and its head, the torn line, the writer's lock
    assert {f for f, verdict in by_file.items() if verdict == "skipped"} == companions
    assert {f for f, verdict in by_file.items() if verdict == "ok"} == {str(f) for f in files} - companions
    assert len(lines) == len(files) and "BROKEN" not in "\n".join(lines)


def test_a_file_given_twice_is_verified_once(capsys, log_with_evidence) -> None:
    rotated = sorted(log_with_evidence.parent.glob("audit.jsonl.[0-9]*"))
    again = log_with_evidence.parent / "." / log_with_evidence.name
    code, lines, err = verify(capsys, *rotated, log_with_evidence, again, log_with_evidence, rotated[0])
    assert code == 0, "\n".join(lines) + err
    assert len(lines) == len(rotated) + 1 and all(": ok: " in line for line in lines), lines


def test_a_broken_segment_among_its_companions_is_still_broken(capsys, log_with_evidence) -> None:
    rotated = sorted(log_with_evidence.parent.glob("audit.jsonl.[0-9]*"))
    rotated[0].write_bytes(b"")  # a rotated file emptied: its name still says where it ended
    code, lines, _ = verify(capsys, *sorted(log_with_evidence.parent.glob("audit.jsonl*")))
    assert code == 1
    assert [line.split(": ", 2)[1] for line in lines if line.startswith(f"{rotated[0]}: ")] == ["BROKEN at line 1"]


def test_only_files_kept_beside_a_log_is_nothing_to_verify(capsys, log_with_evidence) -> None:
    head = log_with_evidence.with_name("audit.jsonl.head")
    code, lines, err = verify(capsys, head)
    assert code == 2 and err.startswith("toolgate: nothing_to_verify: "), err
    assert lines == [f"{head}: skipped: the head of audit.jsonl: checked with that log"]
