"""An approval record whose arguments are not strict JSON (a damaged store, a buggy or hostile
gateway) is listed, shown and watched without a traceback, marked malformed and escaped; the
CLI refuses to sign it (``args_not_strict_json``, exit 3), since it cannot show the approver
exactly what the signature would cover. The real CLI in subprocesses against ``toolgate serve``
in a subprocess; the record is damaged by writing its ``args_json`` into the server's SQLite file."""

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


def damaged(gw: GatewayProcess, args_json: str) -> str:
    """A pending request whose stored arguments are then replaced by ``args_json``."""
    out = toolgate(gw, "call", "count_write", "--args", '{"path": "report.txt", "n": 7}', key="demo-agent-key")
    assert out.returncode == 4, out.stdout + out.stderr
    approval_id = json.loads(out.stdout)["approval_id"]
    with sqlite3.connect(gw.tmp / "data" / "toolgate.db", timeout=10) as db:
        changed = db.execute("UPDATE approvals SET record=json_set(record, '$.args_json', ?) WHERE approval_id=?",
                             (args_json, approval_id)).rowcount
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


@pytest.mark.parametrize("args_json", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_record_is_not_signed(gateway, keys: Path, args_json: str) -> None:
    approval_id = damaged(gateway, args_json)
    for verb, extra in (("approve", ()), ("reject", ("--reason", "broken"))):
        out = toolgate(gateway, "approvals", verb, approval_id, "--key", str(keys / "alice.pem"), *extra, "--yes",
                       key=APPROVER["alice"])
        last = out.stderr.splitlines()[-1] if out.stderr else ""
        assert out.returncode == EXIT["args_not_strict_json"] == 3, out.stderr
        assert last.startswith("toolgate: args_not_strict_json: refusing to sign: "), out.stderr
        assert "MALFORMED" in out.stdout  # shown, marked, before the refusal
    record = json.loads(toolgate(gateway, "approvals", "show", approval_id, "--json", key=APPROVER["alice"]).stdout)
    assert (record["status"], record["approvers"]) == ("pending", [])
    assert calls_recorded(gateway.tmp / "data" / "sandbox", "count_write") == 0
