"""Whether a stored approval request is damaged is said by the gateway in ``Approval.damage``,
never by a reason's text: a policy whose reason starts like the gateway's mark
(``toolgate: malformed record: ``) has a request that the CLI shows with that reason and signs,
and the gateway approves; a request the gateway could not read whole is still refused, by the CLI
(``request_malformed``) and by the gateway whatever the client does (``invalid_approval``).
Over a real gateway on 127.0.0.1 (port 0), in process for gRPC and in a subprocess for the real
CLI; the policy is the demo bundle with its ops reason changed, the damage written into SQLite."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import grpc
import pytest
import yaml

from approval_helpers import APPROVER, ROOT, pending, serving, toolgate, write_config
from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals import tokens
from gateway.approvals.malformed import MALFORMED_REASON
from gateway.arguments import args_hash
from gateway.cli._errors import EXIT, CliError
from gateway.cli.approvals_cmd import _hash_to_sign, approval_dict, describe
from gateway.testing import GatewayProcess, calls_recorded

LOOKALIKE = MALFORMED_REASON + "step: not an integer (str)"
"""A policy's own reason, the text the gateway's mark of a damaged request would have."""
PROBLEM = "step: not an integer (str)"


def lookalike_config(tmp: Path) -> Path:
    """The approval tests' config with the demo policy's ops reason replaced by ``LOOKALIKE``."""
    bundle = tmp / "rego"
    shutil.copytree(ROOT / "rego", bundle)
    rego = bundle / "toolgate" / "decision.rego"
    text = rego.read_text()
    assert text.count('"write tools need ops approval"') == 1
    rego.write_text(text.replace('"write tools need ops approval"', json.dumps(LOOKALIKE)))
    path = write_config(tmp)
    raw = yaml.safe_load(path.read_text())
    raw["policy"]["bundle"] = str(bundle)
    path.write_text(yaml.safe_dump(raw))
    return path


def damage_step(tmp: Path, approval_id: str) -> None:
    """Store ``step`` of the request as text (the gateway writes an integer): damaged so, it may be
    rejected, never approved."""
    with sqlite3.connect(tmp / "data" / "toolgate.db", timeout=10) as db:
        changed = db.execute("UPDATE approvals SET record=json_set(record, '$.step', 'seven') WHERE approval_id=?",
                             (approval_id,)).rowcount
    db.close()
    assert changed == 1


def approval(**fields) -> pb.Approval:
    args = {"path": "report.txt", "n": 7}
    return pb.Approval(approval_id="a-1", status="pending", tool="count_write", args_json=json.dumps(args).encode(),
                       args_hash=args_hash(args), **fields)


# -- the CLI reads the field ---------------------------------------------------------------------


def test_the_cli_signs_a_request_whose_policy_reason_looks_like_the_mark() -> None:
    a = approval(reasons=[LOOKALIKE])
    assert _hash_to_sign(a, tokens.TYP_APPROVAL) == a.args_hash
    assert "MALFORMED" not in describe(a) and f"\nreason     {LOOKALIKE}\n" in describe(a)
    shown = approval_dict(a)
    assert shown["reasons"] == [LOOKALIKE] and "record_malformed" not in shown


def test_the_cli_refuses_to_approve_a_request_the_gateway_says_is_damaged_whatever_its_reasons() -> None:
    a = approval(reasons=["write tools need ops approval"], damage=PROBLEM)  # no mark among the reasons
    with pytest.raises(CliError) as err:
        _hash_to_sign(a, tokens.TYP_APPROVAL)
    assert err.value.code == "request_malformed" and PROBLEM in str(err.value)
    assert f"MALFORMED  the gateway could not read this stored request whole ({PROBLEM})" in describe(a)
    assert approval_dict(a)["record_malformed"] == PROBLEM
    assert _hash_to_sign(a, tokens.TYP_REJECTION) == a.args_hash  # a rejection still may


def test_the_cli_shows_the_gateways_mark_once_not_as_a_policy_reason() -> None:
    a = approval(reasons=[LOOKALIKE, "write tools need ops approval", MALFORMED_REASON + PROBLEM], damage=PROBLEM)
    assert approval_dict(a)["reasons"] == [LOOKALIKE, "write tools need ops approval"]  # the policy's, both


# -- the gateway sets the field and refuses whatever the client does ------------------------------


@pytest.fixture
async def lookalike_gw(tmp_path: Path):
    async with serving(lookalike_config(tmp_path)) as both:
        yield both


async def test_the_gateway_approves_a_request_whose_policy_reason_looks_like_the_mark(lookalike_gw) -> None:
    running, c = lookalike_gw
    resp = await c.call("count_write", '{"path": "out.txt", "n": 1}')
    assert (resp.code, list(resp.approval_required.reasons)) == ("approval_required", [LOOKALIKE])
    a = await c.get(resp.approval_required.approval_id, APPROVER["alice"])
    assert (a.damage, list(a.reasons)) == ("", [LOOKALIKE])
    assert (await c.submit(a, "alice")).status == "approved"


async def test_the_gateway_marks_a_damaged_request_and_refuses_to_approve_it(lookalike_gw, tmp_path: Path) -> None:
    running, c = lookalike_gw
    resp = await c.call("count_write", '{"path": "out.txt", "n": 1}')
    whole = await c.get(resp.approval_required.approval_id, APPROVER["alice"])
    damage_step(tmp_path, whole.approval_id)
    a = await c.get(whole.approval_id, APPROVER["alice"])
    assert (a.damage, list(a.reasons)) == (PROBLEM, [LOOKALIKE, MALFORMED_REASON + PROBLEM])
    with pytest.raises(grpc.aio.AioRpcError) as err:  # a client that does not read the field
        await c.submit(whole, "alice")
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert json.loads(err.value.details())["code"] == "invalid_approval"
    assert (await c.get(a.approval_id, APPROVER["alice"])).status == "pending"


# -- the real CLI against the real gateway ----------------------------------------------------------


@pytest.fixture(scope="module")
def lookalike_gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gw")
    gw = GatewayProcess(lookalike_config(tmp), data_dir=tmp / "data").start()
    gw.tmp = tmp
    try:
        yield gw
    finally:
        gw.stop()


def test_an_approver_approves_a_request_whose_policy_reason_looks_like_the_mark(lookalike_gateway, keys: Path) -> None:
    gw, alice = lookalike_gateway, APPROVER["alice"]
    approval_id = pending(gw)
    text = toolgate(gw, "approvals", "show", approval_id, key=alice)
    assert text.returncode == 0, text.stderr
    assert f"\nreason     {LOOKALIKE}\n" in text.stdout and "MALFORMED" not in text.stdout
    record = json.loads(toolgate(gw, "approvals", "show", approval_id, "--json", key=alice).stdout)
    assert record["reasons"] == [LOOKALIKE] and "record_malformed" not in record
    lines = toolgate(gw, "approvals", "list", key=alice).stdout.splitlines()
    assert "MALFORMED" not in next(line for line in lines if line.startswith(approval_id))
    out = toolgate(gw, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes", key=alice)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["status"] == "approved"
    ran = toolgate(gw, "call", "count_write", "--args", '{"path": "report.txt", "n": 7}', "--approval-id", approval_id,
                   key="demo-agent-key")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert calls_recorded(gw.tmp / "data" / "sandbox", "count_write") == 1


def test_an_approver_cannot_approve_a_damaged_request_with_such_a_reason(lookalike_gateway, keys: Path) -> None:
    gw, alice = lookalike_gateway, APPROVER["alice"]
    approval_id = pending(gw)
    damage_step(gw.tmp, approval_id)
    record = json.loads(toolgate(gw, "approvals", "show", approval_id, "--json", key=alice).stdout)
    assert (record["record_malformed"], record["reasons"]) == (PROBLEM, [LOOKALIKE])
    out = toolgate(gw, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes", key=alice)
    assert out.returncode == EXIT["request_malformed"], out.stderr
    assert out.stderr.splitlines()[-1].startswith(f"toolgate: request_malformed: refusing to sign: the gateway could "
                                                  f"not read this stored request whole ({PROBLEM})")
    assert json.loads(toolgate(gw, "approvals", "show", approval_id, "--json", key=alice).stdout)["status"] == "pending"
