"""`toolgate policy replay`: audited policy inputs re-evaluated against a candidate bundle."""

from __future__ import annotations

import argparse
import io
import json
import unicodedata
from pathlib import Path

from gateway.cli import policy_cmd
from policies.replay import read_audit, replay_file

REGO = Path(__file__).resolve().parents[2] / "rego"


def refund_input(amount: float, ticket: str | None = None) -> dict:
    return {
        "caller": {"tenant": "acme", "agent": "bot", "user": "alice"},
        "tool": {"name": "refund", "version": "1", "risk": {"side_effect": "external_write"}, "labels": [], "constraints": {}},
        "args": {"amount": amount, "order_id": "o-1", "currency": "EUR"},
        "args_hash": "sha256:00",
        "run": {"id": "r", "step": 1, "evidence": {"ticket_id": ticket} if ticket else {}},
        "environment": {"gateway_id": "toolgate", "time": "2025-01-01T00:00:00Z"},
    }


def write_audit(path: Path) -> Path:
    records = [
        {"seq": 1, "stage": "authenticate", "decision_id": "d-1", "code": "ok"},
        {"seq": 2, "stage": "policy", "decision_id": "d-1", "tool": "refund", "decision": "allow", "policy_input": refund_input(50)},
        {"seq": 3, "stage": "policy", "decision_id": "d-2", "tool": "refund", "decision": "allow", "policy_input": refund_input(90)},
        {"seq": 4, "stage": "policy", "decision_id": "d-3", "tool": "refund", "decision": "require_approval", "policy_input": refund_input(500)},
        {"seq": 5, "stage": "policy", "decision_id": "d-4", "tool": "read_file", "decision": "allow"},
        {"seq": 6, "stage": "execute", "decision_id": "d-1", "code": "ok"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    return path


def write_call_audit(path: Path) -> Path:
    """The same calls as the gateway writes them: a call's steps inside its records."""
    def call(seq: int, decision_id: str, tool: str, policy: dict, record: str = "result") -> dict:
        steps = [{"stage": "authenticate", "code": "ok"}, {"stage": "policy", "code": "ok", **policy}]
        return {"seq": seq, "stage": record, "decision_id": decision_id, "tool": tool, "code": "ok", "steps": steps}

    records = [
        call(1, "d-1", "refund", {"decision": "allow", "policy_input": refund_input(50)}, "authorized"),
        {"seq": 2, "stage": "result", "decision_id": "d-1", "tool": "refund", "code": "ok",
         "steps": [{"stage": "execute", "code": "ok"}]},
        call(3, "d-2", "refund", {"decision": "allow", "policy_input": refund_input(90)}, "authorized"),
        call(4, "d-3", "refund", {"decision": "require_approval", "policy_input": refund_input(500)}),
        call(5, "d-4", "read_file", {"decision": "allow"}, "authorized"),
        {"seq": 6, "stage": "approval", "decision_id": "d-3", "code": "ok", "action": "requested"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_replay_reads_the_steps_inside_call_records(tmp_path):
    report = replay_file(write_call_audit(tmp_path / "audit.jsonl"), candidate_bundle(tmp_path))
    assert (report.replayed, report.skipped) == (3, 1)
    assert [(c.decision_id, c.tool, c.old, c.new) for c in report.changes] == [
        ("d-2", "refund", "allow", "require_approval")
    ]


def candidate_bundle(tmp_path: Path) -> Path:
    """The default bundle with the automatic refund limit lowered from 100 to 60."""
    bundle = tmp_path / "candidate" / "toolgate"
    bundle.mkdir(parents=True)
    text = (REGO / "toolgate" / "decision.rego").read_text()
    assert text.count("refund_amount <= 100\n") == 1
    text = text.replace("refund_amount <= 100\n", "refund_amount <= 60\n")
    (bundle / "decision.rego").write_text(text)
    return bundle.parent


def test_replay_against_the_same_policy_changes_nothing(tmp_path):
    report = replay_file(write_audit(tmp_path / "audit.jsonl"), REGO)
    assert (report.replayed, report.skipped, report.changes) == (3, 1, [])


def test_replay_reports_the_decisions_a_candidate_changes(tmp_path):
    report = replay_file(write_audit(tmp_path / "audit.jsonl"), candidate_bundle(tmp_path))
    assert [(c.decision_id, c.tool, c.old, c.new) for c in report.changes] == [
        ("d-2", "refund", "allow", "require_approval")
    ]


def run_cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="toolgate")
    policy_cmd.add_parser(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(list(argv))
    out = io.StringIO()
    return ns.func(ns, out=out, err=out), out.getvalue()


def test_replay_cli_prints_a_table_and_a_summary(tmp_path):
    audit = write_audit(tmp_path / "audit.jsonl")
    code, out = run_cli("policy", "replay", "--audit", str(audit), "--policy", str(candidate_bundle(tmp_path)))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["DECISION_ID", "TOOL", "OLD", "NEW"]
    assert lines[1].split() == ["d-2", "refund", "allow", "->", "require_approval"]
    assert lines[-1].startswith("1 of 3 replayed decisions change")
    assert "1 policy records without policy_input skipped" in lines[-1]


def test_replay_cli_rejects_a_corrupt_audit_line(tmp_path):
    audit = tmp_path / "audit.jsonl"
    audit.write_text('{"seq": 1}\n{not json\n')
    code, out = run_cli("policy", "replay", "--audit", str(audit), "--policy", str(REGO))
    assert code == 2
    assert "audit.jsonl:2" in out


def test_read_audit_skips_blank_lines(tmp_path):
    assert len(read_audit(write_audit(tmp_path / "audit.jsonl"))) == 6


HOSTILE = "\u009b2J\u009b31mall clear\u202eevil\u200b\u2028\x1b[8m"  # CSI, bidi override, zero width, ESC


def test_replay_cli_prints_what_the_log_holds_escaped(tmp_path):
    """Decision ids and tool names come from the audit log, which agents' calls wrote into: a
    value with escape sequences or bidi overrides prints escaped, and the table keeps its rows."""
    audit = tmp_path / "audit.jsonl"
    audit.write_text(json.dumps({"seq": 1, "stage": "policy", "decision_id": f"d-{HOSTILE}", "tool": f"refund{HOSTILE}",
                                 "decision": "allow", "policy_input": refund_input(90)}) + "\n")
    code, out = run_cli("policy", "replay", "--audit", str(audit), "--policy", str(candidate_bundle(tmp_path)))
    assert code == 0, out
    assert [c for c in out if c != "\n" and (unicodedata.category(c)[0] == "C" or unicodedata.category(c) in
                                             ("Zl", "Zp"))] == [], ascii(out)
    lines = out.splitlines()
    assert len(lines) == 4 and lines[1].startswith("d-\\u009b2J\\u009b31mall clear\\u202eevil\\u200b\\u2028\\u001b[8m")
    assert lines[1].split()[-3:] == ["allow", "->", "require_approval"]


def test_replay_reads_several_logs_and_skips_the_files_kept_beside_them(tmp_path):
    """A second --audit replaced the first, so rotated files and workers' logs could not be
    replayed together; ``--audit audit.jsonl*`` read the head and lock files as logs."""
    rotated = write_audit(tmp_path / "audit.jsonl.000000000006")
    active = write_call_audit(tmp_path / "audit.jsonl")
    (tmp_path / "audit.jsonl.head").write_text('{"seq": 6}\n')
    (tmp_path / "audit.jsonl.lock").write_text("123\n")
    bundle = str(candidate_bundle(tmp_path))
    one = run_cli("policy", "replay", "--audit", str(active), "--policy", bundle)[1].splitlines()[-1]
    assert one.startswith("1 of 3 replayed decisions change"), one
    for argv in (["--audit", str(rotated), "--audit", str(active)],
                 ["--audit", str(rotated), str(active), str(tmp_path / "audit.jsonl.head"),
                  str(tmp_path / "audit.jsonl.lock"), str(active)]):
        code, out = run_cli("policy", "replay", *argv, "--policy", bundle)
        assert code == 0, out
        assert out.splitlines()[-1].startswith("2 of 6 replayed decisions change"), out  # each file once
    assert "skipped" in out and "audit.jsonl.head" in out and "audit.jsonl.lock" in out
