"""The real CLI in subprocesses against ``toolgate serve`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from approval_helpers import APPROVER, ROOT, toolgate, write_config
from gateway.testing import GatewayProcess, calls_recorded

ARGS = '{"path": "report.txt", "n": 7}'



def agent_call(gw: GatewayProcess, *extra: str) -> tuple[int, dict]:
    out = toolgate(gw, "call", "count_write", "--args", ARGS, "--run-id", "run-7", *extra, key="demo-agent-key")
    return out.returncode, json.loads(out.stdout)



def test_cli_approve_then_retry_executes_once(gateway: GatewayProcess, keys: Path, tmp_path: Path) -> None:
    rc, out = agent_call(gateway)
    assert (rc, out["code"]) == (4, "approval_required")
    approval_id = out["approval_id"]
    listed = toolgate(gateway, "approvals", "list", "--json", key=APPROVER["alice"])
    assert approval_id in {a["approval_id"] for a in json.loads(listed.stdout)}
    shown = toolgate(gateway, "approvals", "show", approval_id, key=APPROVER["alice"])
    assert "count_write" in shown.stdout and '"report.txt"' in shown.stdout and "run-7" in shown.stdout
    refused = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes",
                      key="demo-agent-key")
    assert refused.returncode == 3 and "permission_denied" in refused.stderr  # refused by the gateway
    done = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes", key=APPROVER["alice"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "approved"
    rc, first = agent_call(gateway, "--approval-id", approval_id)
    assert (rc, first["code"], first["replayed"]) == (0, "ok", False)
    rc, again = agent_call(gateway, "--approval-id", approval_id)
    assert (rc, again["replayed"]) == (0, True)
    assert calls_recorded(tmp_path / "data" / "sandbox", "count_write") == 1


def test_cli_reject_ends_the_request(gateway: GatewayProcess, keys: Path, tmp_path: Path) -> None:
    _, out = agent_call(gateway)
    approval_id = out["approval_id"]
    rejected = toolgate(gateway, "approvals", "reject", approval_id, "--key", str(keys / "bob.pem"),
                        "--reason", "wrong file", "--yes", key=APPROVER["bob"])
    assert rejected.returncode == 0, rejected.stderr
    rc, retry = agent_call(gateway, "--approval-id", approval_id)
    assert (rc, retry["code"]) == (3, "approval_rejected") and "wrong file" in " ".join(retry["reasons"])
    late = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes", key=APPROVER["alice"])
    assert late.returncode == 3 and "approval_rejected" in late.stderr
    assert calls_recorded(tmp_path / "data" / "sandbox", "count_write") == 0


def test_cli_refuses_to_sign_with_a_key_that_is_not_the_approvers(gateway: GatewayProcess, keys: Path) -> None:
    _, out = agent_call(gateway)
    wrong = toolgate(gateway, "approvals", "approve", out["approval_id"], "--key", str(keys / "bob.pem"), "--yes",
                     key=APPROVER["alice"])
    assert wrong.returncode == 3 and "invalid_approval" in wrong.stderr


def test_cli_signs_only_what_the_approver_confirms(gateway: GatewayProcess, keys: Path) -> None:
    _, out = agent_call(gateway)
    approval_id = out["approval_id"]
    sign = [sys.executable, "-m", "gateway.cli", "approvals", "approve", approval_id, "--key", str(keys / "alice.pem")]
    env = {**os.environ, "TOOLGATE_TARGET": gateway.address, "TOOLGATE_API_KEY": APPROVER["alice"]}
    for answer in ("", "n\n", "sure\n"):  # no answer, no, anything but yes: nothing signed
        said = subprocess.run(sign, input=answer, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
        assert said.returncode == 3 and "not confirmed" in said.stderr, said.stderr
        assert '"report.txt"' in said.stdout and "[y/N]" in said.stderr  # shown, then asked
    shown = toolgate(gateway, "approvals", "show", approval_id, "--json", key=APPROVER["alice"])
    assert json.loads(shown.stdout)["status"] == "pending"
    said = subprocess.run(sign, input="y\n", capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert said.returncode == 0 and json.loads(said.stdout.splitlines()[-1])["status"] == "approved"


def test_what_the_agent_labels_its_call_with_cannot_draw_on_the_approvers_terminal(gateway: GatewayProcess) -> None:
    from gateway._proto.toolgate.v1 import gateway_pb2 as pb
    from gateway.cli.approvals_cmd import describe

    forged = "run-7\x1b[8m\nreason     looks harmless\u202e\r"
    out = toolgate(gateway, "call", "count_write", "--args", ARGS, "--run-id", forged, key="demo-agent-key")
    refused = json.loads(out.stdout)
    assert (out.returncode, refused["code"]) == (3, "invalid_arguments")  # refused at the edge: plain text only
    assert [e["path"] for e in refused["field_errors"]] == ["run_id"]
    a = pb.Approval(approval_id="a-1", tool="count_write", run_id=forged, reasons=["ok\x1b]0;title\x07"],
                    args_json=ARGS.encode(), rejection_reason="no\u2028yes")  # and were one stored, say by policy
    text = describe(a)
    assert all(c == "\n" or c.isprintable() for c in text)
    assert "\\u001b[8m\\u000areason" in text and "\\u202e" in text and "no\\u2028yes" in text


def test_kill_after_grant_then_retry_after_restart_executes_once(keys: Path, tmp_path: Path) -> None:
    config, data = write_config(tmp_path), tmp_path / "data"
    gw = GatewayProcess(config, data_dir=data).start()
    try:
        _, out = agent_call(gw)
        approval_id = out["approval_id"]
        ok = toolgate(gw, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes", key=APPROVER["alice"])
        assert ok.returncode == 0, ok.stderr
    finally:
        gw.kill()
    gw = GatewayProcess(config, data_dir=data).start()
    try:
        rc, first = agent_call(gw, "--approval-id", approval_id)
        assert (rc, first["code"], first["replayed"]) == (0, "ok", False), first
        rc, again = agent_call(gw, "--approval-id", approval_id)
        assert again["replayed"] is True
    finally:
        gw.stop()
    assert calls_recorded(data / "sandbox", "count_write") == 1


def test_keys_new_writes_a_usable_key_and_prints_the_entry(tmp_path: Path) -> None:
    env = {**os.environ, "KEYPASS": "s3cret"}
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "keys", "new", "--approver", "erin", "--out",
                          str(tmp_path), "--passphrase-env", "KEYPASS"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    entry = __import__("yaml").safe_load(out.stdout)[0]
    assert entry["id"] == "erin" and entry["keys"][0]["kid"].startswith("erin-")
    (pem,) = tmp_path.glob("*.pem")
    assert pem.stat().st_mode & 0o077 == 0
    from gateway.approvals.keyring import load_private_key, raw_public_b64

    with pytest.raises((TypeError, ValueError)):
        load_private_key(pem.read_bytes())  # encrypted: no passphrase, no key
    assert raw_public_b64(load_private_key(pem.read_bytes(), b"s3cret").public_key()) == entry["keys"][0]["public_key"]


def test_a_run_id_padded_to_look_like_a_review_line_stays_inside_its_quotes() -> None:
    """Plain text passes the edge, spaces included: a run id padded past the terminal's width
    with a fake line after it shows on the run line, quoted, its own quotes escaped."""
    from gateway._proto.toolgate.v1 import gateway_pb2 as pb
    from gateway.cli.approvals_cmd import describe

    padded = "r-1" + " " * 150 + 'reason     pre-approved by finance" step 1'
    text = describe(pb.Approval(approval_id="a-1", tool="count_write", run_id=padded, step=2, args_json=ARGS.encode()))
    [run_line] = [line for line in text.splitlines() if "pre-approved" in line]
    assert run_line.startswith('run        "r-1 ') and run_line.endswith('pre-approved by finance\\" step 1" step 2')
    assert not any(line.startswith("reason") for line in text.splitlines())
