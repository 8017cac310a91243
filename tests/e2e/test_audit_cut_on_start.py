"""A gateway starting on a log that ends before its head (records removed after they were
written) keeps the evidence and says so, instead of carrying the chain on over the cut and
overwriting the head that showed it. Real files; the AuditLog the gateway opens."""

from __future__ import annotations

import json

import pytest

from gateway.audit_verify import verify_file
from tests.conftest import StoppedClock, audit_records, write_audit_log


def test_a_log_cut_short_is_set_aside_and_a_new_chain_names_it(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 6)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]))  # the last three records removed
    write_audit_log(path, 1)  # the gateway starts again, and one call is recorded
    (kept,) = tmp_path.glob("audit.jsonl.cut-*[0-9]")
    assert len(audit_records(kept)) == 3 and (tmp_path / f"{kept.name}.head").exists()
    first, call = audit_records(path)
    assert (first["stage"], first["code"], first["seq"]) == ("audit_restarted", "audit_log_cut", 1)
    assert (first["previous_file"], first["log_ended_at_seq"], first["head_seq"]) == (kept.name, 3, 6)
    assert call["seq"] == 2 and verify_file(path).ok  # the new chain is whole
    cut = verify_file(kept)  # and the evidence still shows what happened
    assert not cut.ok and "head" in cut.reason


def test_a_deleted_log_beside_its_head_is_recorded_too(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    path.unlink()
    write_audit_log(path, 0)
    (head,) = tmp_path.glob("audit.jsonl.cut-*.head")
    assert json.loads(head.read_text())["seq"] == 2
    (first,) = audit_records(path)
    assert (first["stage"], first["log_ended_at_seq"], first["head_seq"]) == ("audit_restarted", 0, 2)


def test_an_intact_log_goes_on_where_it_ended(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 3)
    write_audit_log(path, 2)
    assert [r["seq"] for r in audit_records(path)] == [1, 2, 3, 4, 5]
    assert not list(tmp_path.glob("*.cut-*")) and verify_file(path).ok


def test_a_second_cut_in_the_same_tick_keeps_the_first_evidence(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("gateway.audit.time", StoppedClock)
    path = tmp_path / "audit.jsonl"
    firsts = []
    for kept_records in (3, 1):
        write_audit_log(path, 6)
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:kept_records]))  # records removed from the end again
        write_audit_log(path, 0)  # the gateway starts again, on the same clock reading
        firsts.append(audit_records(path)[0])
        path.unlink()
        path.with_name(path.name + ".head").unlink()
    names = [first["previous_file"] for first in firsts]
    assert len(set(names)) == 2, names  # each start names its own evidence
    for name, first, kept_records in zip(names, firsts, (3, 1)):
        kept = tmp_path / name
        assert len(audit_records(kept)) == kept_records == first["log_ended_at_seq"]  # neither replaced the other
        assert json.loads((tmp_path / f"{name}.head").read_text())["seq"] == first["head_seq"] == 6


CRAFTED_HEADS = [
    b"[" * 4000,  # nested past the recursion limit: the start raised RecursionError
    b'{"seq": 1e400, "hash": "sha256:x"}',  # int(inf) raised OverflowError
    b'{"seq": 1.9, "hash": "sha256:x"}',  # read as seq 1
    b'{"seq": 9, "seq": 1, "hash": "sha256:x"}',  # a key twice
    b'{"seq": "9", "hash": "sha256:x"}',
    b"not json",
]


@pytest.mark.parametrize("head", CRAFTED_HEADS)
def test_a_head_that_is_not_one_is_set_aside_with_its_log_not_overwritten(tmp_path, head) -> None:
    """A head that is there but is not ``{"seq": int, "hash": str}`` stops the gateway from
    telling whether records were removed; the next flush would overwrite it and the evidence
    with it (verify then passed a cut log). Both are set aside and the new chain says why."""
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 4)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))  # two records removed
    path.with_name("audit.jsonl.head").write_bytes(head)  # and the head that showed it spoiled
    write_audit_log(path, 1)
    (kept,) = tmp_path.glob("audit.jsonl.cut-*[0-9]")
    assert len(audit_records(kept)) == 2 and (tmp_path / f"{kept.name}.head").read_bytes() == head
    first, call = audit_records(path)
    assert (first["stage"], first["code"], first["seq"]) == ("audit_restarted", "audit_head_unreadable", 1)
    assert (first["previous_file"], first["log_ended_at_seq"]) == (kept.name, 2) and first["head_problem"]
    assert call["seq"] == 2 and verify_file(path).ok
    assert not verify_file(kept).ok and "head file" in verify_file(kept).reason


def test_a_spoiled_head_beside_no_log_is_set_aside_too(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    path.with_name("audit.jsonl.head").write_bytes(b"[" * 4000)
    write_audit_log(path, 1)
    (head,) = tmp_path.glob("audit.jsonl.cut-*.head")
    assert head.read_bytes() == b"[" * 4000
    first, call = audit_records(path)
    assert (first["code"], first["log_ended_at_seq"], call["seq"]) == ("audit_head_unreadable", 0, 2)
    assert verify_file(path).ok


def test_a_last_line_with_a_seq_past_a_double_is_passed_over_at_start(tmp_path) -> None:
    """int(inf) raised OverflowError while the start looked for where the chain ends."""
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 2)
    with open(path, "ab") as f:
        f.write(b'{"seq": 1e400, "hash": "sha256:x"}\n')
    write_audit_log(path, 1)
    assert audit_records(path)[-1]["seq"] == 3  # it went on from the last record that was one
    assert not verify_file(path).ok  # and the line that was not one is still there to be seen


@pytest.mark.parametrize("blank", [None, b"", b" " * 128])
def test_a_log_with_records_and_no_head_is_set_aside(tmp_path, blank) -> None:
    """The head is written before a log's first record, so a log with records and no head (or a
    blank one) lost it since; the start wrote a fresh head and verify passed a cut log."""
    path = tmp_path / "audit.jsonl"
    write_audit_log(path, 4)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))
    head = path.with_name("audit.jsonl.head")
    head.unlink() if blank is None else head.write_bytes(blank)
    write_audit_log(path, 1)
    (kept,) = tmp_path.glob("audit.jsonl.cut-*[0-9]")
    assert len(audit_records(kept)) == 2
    first, call = audit_records(path)
    assert (first["code"], first["head_problem"]) == ("audit_head_unreadable", "missing or empty beside a log with records")
    assert call["seq"] == 2 and verify_file(path).ok and not verify_file(kept).ok
