"""An approval record whose arguments are not strict JSON (a damaged store, a buggy or hostile
gateway) is listed, shown and watched without a traceback, marked malformed and escaped; the
CLI refuses to approve it (``args_not_strict_json``, exit 3), since it cannot show the approver
exactly what the signature would cover, but rejects it (a rejection can only refuse the call:
it is bound to the gateway's args hash, and the CLI says so). So for a record the gateway could
not read whole (``MALFORMED-RECORD``; approve: ``request_malformed``). The real CLI in
subprocesses against ``toolgate serve`` in a subprocess; the record is damaged by writing into
the server's SQLite file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from approval_helpers import APPROVER, gateway_process, toolgate
from gateway.cli._errors import EXIT
from gateway.terminal import shown
from gateway.testing import GatewayProcess, calls_recorded

MALFORMED = {
    "not-json": '{"path": "report.txt\x1b[2J\n", "n": 7',  # cut short, with an escape sequence and a new line
    "not-an-object": '["report.txt", 7]',
    # json.loads would keep the second path only: the approver would see one, the tool get the other
    "duplicate-key": '{"path": "report.txt", "path": "/etc/passwd", "n": 7}',
}



@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with gateway_process(tmp_path_factory.mktemp("gw")) as gw:
        yield gw


def damaged(gw: GatewayProcess, args_json: str, field: str = "args_json") -> str:
    """A pending request whose stored ``field`` (its arguments) is then replaced by ``args_json``."""
    out = toolgate(gw, "call", "count_write", "--args", '{"path": "report.txt", "n": 7}', key="demo-agent-key")
    assert out.returncode == 4, out.stdout + out.stderr
    approval_id = json.loads(out.stdout)["approval_id"]
    with sqlite3.connect(gw.tmp / "data" / "toolgate.db", timeout=10) as db:
        changed = db.execute("UPDATE approvals SET record=json_set(record, ?, ?) WHERE approval_id=?",
                             (f"$.{field}", args_json, approval_id)).rowcount
    db.close()
    assert changed == 1
    return approval_id


def assert_marked(record: dict, args_json: str) -> None:
    assert record["args"] is None and record["args_malformed"], record
    assert record["args_raw"] == args_json  # as received (ASCII here), escaped by the JSON around it


@pytest.mark.parametrize("args_json", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_record_is_listed_shown_and_watched_marked(gateway, args_json: str) -> None:
    approval_id = damaged(gateway, args_json)
    alice = APPROVER["alice"]
    as_json = toolgate(gateway, "approvals", "show", approval_id, "--json", key=alice)
    assert as_json.returncode == 0, as_json.stderr
    assert_marked(json.loads(as_json.stdout), args_json)
    listed = toolgate(gateway, "approvals", "list", "--json", key=alice)
    assert listed.returncode == 0, listed.stderr
    assert_marked(next(a for a in json.loads(listed.stdout) if a["approval_id"] == approval_id), args_json)
    watched = toolgate(gateway, "approvals", "watch", approval_id, "--include-current", "--timeout", "2", key=alice)
    assert watched.returncode == 0, watched.stderr
    assert_marked(json.loads(watched.stdout.splitlines()[0])["approval"], args_json)
    text = toolgate(gateway, "approvals", "show", approval_id, key=alice)
    assert text.returncode == 0, text.stderr
    assert "\nMALFORMED  the arguments are not strict JSON" in text.stdout
    assert text.stdout.endswith("\narguments:\n" + shown(args_json) + "\n")  # as received, on one line, escaped
    assert "\x1b" not in text.stdout
    lines = toolgate(gateway, "approvals", "list", key=alice)
    assert lines.returncode == 0, lines.stderr
    assert "MALFORMED-ARGS" in next(line for line in lines.stdout.splitlines() if line.startswith(approval_id))


def show_json(gw: GatewayProcess, approval_id: str) -> dict:
    out = toolgate(gw, "approvals", "show", approval_id, "--json", key=APPROVER["alice"])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def sign(gw: GatewayProcess, keys: Path, verb: str, approval_id: str, *extra: str):
    return toolgate(gw, "approvals", verb, approval_id, "--key", str(keys / "alice.pem"), *extra, "--yes",
                    key=APPROVER["alice"])


def audited(gw: GatewayProcess, action: str, approval_id: str) -> list[dict]:
    lines = (gw.tmp / "data" / "audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if (r.get("action"), r.get("approval_id")) == (action, approval_id)]


@pytest.mark.parametrize("args_json", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_record_is_not_approved(gateway, keys: Path, args_json: str) -> None:
    approval_id = damaged(gateway, args_json)
    out = sign(gateway, keys, "approve", approval_id)
    last = out.stderr.splitlines()[-1] if out.stderr else ""
    assert out.returncode == EXIT["args_not_strict_json"] == 3, out.stderr
    assert last.startswith("toolgate: args_not_strict_json: refusing to sign: "), out.stderr
    assert "MALFORMED" in out.stdout  # shown, marked, before the refusal
    record = show_json(gateway, approval_id)
    assert (record["status"], record["approvers"]) == ("pending", [])
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0


@pytest.mark.parametrize("args_json", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_record_can_be_rejected(gateway, keys: Path, args_json: str) -> None:
    approval_id = damaged(gateway, args_json)
    args_hash = show_json(gateway, approval_id)["args_hash"]
    out = sign(gateway, keys, "reject", approval_id, "--reason", "arguments unreadable")
    assert out.returncode == 0, out.stderr
    assert "MALFORMED" in out.stdout  # shown, marked
    note = out.stderr.splitlines()[0]
    assert note.startswith("NOTE  this request cannot be approved (the arguments are not strict JSON: ")
    assert note.endswith(f"the rejection is bound to the gateway's args hash {args_hash}, not one recomputed here")
    assert json.loads(out.stdout.splitlines()[-1])["status"] == "rejected"
    record = show_json(gateway, approval_id)
    assert (record["status"], record["rejection_reason"]) == ("rejected", "arguments unreadable")
    [rejected] = audited(gateway, "rejected", approval_id)
    assert (rejected["approver"], rejected["code"], rejected["reason"]) == ("alice", "approval_rejected",
                                                                            "arguments unreadable")
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0


def test_a_record_the_gateway_cannot_read_whole_is_shown_marked_rejected_not_approved(gateway, keys: Path) -> None:
    approval_id = damaged(gateway, "seven", field="step")  # not the integer the gateway writes
    text = toolgate(gateway, "approvals", "show", approval_id, key=APPROVER["alice"])
    assert text.returncode == 0, text.stderr
    assert ("\nMALFORMED  the gateway could not read this stored request whole (step: not an integer (str)): what it "
            "could not read is blank; it may be rejected, not approved\n") in text.stdout
    assert "toolgate: malformed record" not in text.stdout  # the gateway's mark is not shown as a policy reason
    record = show_json(gateway, approval_id)
    assert (record["record_malformed"], record["reasons"]) == ("step: not an integer (str)", ["write tools need ops approval"])
    lines = toolgate(gateway, "approvals", "list", key=APPROVER["alice"])
    assert "MALFORMED-RECORD" in next(line for line in lines.stdout.splitlines() if line.startswith(approval_id))
    refused = sign(gateway, keys, "approve", approval_id)
    assert refused.returncode == EXIT["request_malformed"] == 3, refused.stderr
    assert refused.stderr.splitlines()[-1].startswith("toolgate: request_malformed: refusing to sign: the gateway "
                                                      "could not read this stored request whole (step: not an integer (str))")
    assert show_json(gateway, approval_id)["status"] == "pending"
    rejected = sign(gateway, keys, "reject", approval_id, "--reason", "damaged")
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stderr.startswith("NOTE  this request cannot be approved (the gateway could not read it whole: "
                                      "step: not an integer (str))")
    assert show_json(gateway, approval_id)["status"] == "rejected"
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0
