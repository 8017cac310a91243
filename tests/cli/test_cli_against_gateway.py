"""How the CLI reports what a real gateway answers, and what it does when its reader goes away.
The real CLI in subprocesses against ``toolgate serve`` in a subprocess on 127.0.0.1 port 0
(``tests.approvals.approval_helpers``): a refusal by the gateway is one line with its code
(the gateway's outcome code when it sends one) and exit 3; a gateway that cannot be reached, or
that refuses the credentials, exit 6; output cut short by ``| head`` ends quietly with 141."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.cli._client import report_rpc_error
from tests.approvals.approval_helpers import (AGENT, APPROVER, ROOT, gateway_process, pending, private_demo_keys,
                                              toolgate)

ALICE = APPROVER["alice"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with gateway_process(tmp_path_factory.mktemp("gw")) as gw:
        yield gw


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    return private_demo_keys(tmp_path_factory.mktemp("keys"))


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# --- refusals by the gateway: exit 3 ---------------------------------------------------------

def test_a_request_the_gateway_does_not_know_is_not_found_exit_3(gateway) -> None:
    out = toolgate(gateway, "approvals", "show", "no-such-request", key=ALICE)
    assert one_line(out).startswith("toolgate: not_found: ") and out.returncode == 3, out.stderr


def test_a_verb_the_key_has_no_role_for_is_permission_denied_exit_3_as_for_call(gateway) -> None:
    out = toolgate(gateway, "tools", key=ALICE)
    assert one_line(out).startswith("toolgate: permission_denied: ") and out.returncode == 3, out.stderr


def test_an_unknown_api_key_is_unauthenticated_exit_6(gateway) -> None:
    out = toolgate(gateway, "tools", key="no-such-key")
    assert one_line(out).startswith("toolgate: unauthenticated: ") and out.returncode == 6, out.stderr


def test_an_unknown_status_is_a_usage_error_before_any_call(gateway) -> None:
    out = toolgate(gateway, "approvals", "list", "--status", "bogus", key=ALICE)
    line = one_line(out)
    assert line.startswith("toolgate: usage_error: argument --status: ") and out.returncode == 2, out.stderr
    assert "pending" in line and "all" in line and "{" not in line


@pytest.mark.parametrize("status", ["pending", "approved", "rejected", "expired", "executed", "all"])
def test_every_status_the_gateway_knows_is_taken(gateway, status) -> None:
    out = toolgate(gateway, "approvals", "list", "--status", status, "--json", key=ALICE)
    assert out.returncode == 0 and isinstance(json.loads(out.stdout), list), out.stderr


def test_a_gateway_refusal_with_a_code_prints_its_code_and_message_exit_3(gateway, capsys) -> None:
    """What the gateway sends for an unknown status, ``{"code": ..., "message": ...}``, asked for
    directly (the CLI no longer sends one), reported by ``report_rpc_error``."""
    with grpc.insecure_channel(gateway.address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.ApprovalsStub(channel).List(pb.ListApprovalsRequest(status="bogus"),
                                                metadata=[("x-api-key", ALICE)], timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert report_rpc_error(refused.value) == 3
    assert capsys.readouterr().err == "toolgate: invalid_arguments: unknown status 'bogus'\n"


def test_approving_an_approved_request_says_so_without_the_lifetime_hint(gateway, keys) -> None:
    approval_id = pending(gateway)
    approve = ("approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes")
    assert toolgate(gateway, *approve, key=ALICE).returncode == 0
    again = toolgate(gateway, *approve, key=ALICE)
    line = again.stderr.splitlines()[-1]
    assert again.returncode == 3 and line == "toolgate: invalid_approval: the request is approved, not pending", \
        again.stderr


def test_the_largest_step_is_sent(gateway) -> None:
    out = toolgate(gateway, "call", "lookup_policy", "--args", '{"topic": "refunds"}', "--step", "2147483647",
                   key=AGENT)
    assert out.returncode == 0 and json.loads(out.stdout)["outcome"] == "observation", out.stderr


# --- a reader that goes away: quiet, 141 -----------------------------------------------------

def reader_gone(gw, *argv: str, key: str) -> subprocess.CompletedProcess[str]:
    """The CLI with its standard output a pipe whose reader has closed it before anything was written."""
    env = {**os.environ, "TOOLGATE_TARGET": gw.address, "TOOLGATE_API_KEY": key}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    proc.stdout.close()
    err = proc.stderr.read()
    return subprocess.CompletedProcess(proc.args, proc.wait(60), "", err)


def test_show_into_a_closed_pipe_ends_quietly(gateway) -> None:
    out = reader_gone(gateway, "approvals", "show", pending(gateway), key=ALICE)
    assert (out.returncode, out.stderr) == (141, "")


def test_audit_search_into_a_closed_pipe_ends_quietly(gateway) -> None:
    pending(gateway)  # a call, audited: something to find
    out = reader_gone(gateway, "audit", "search", str(gateway.tmp / "data" / "audit.jsonl"), "--steps", key=AGENT)
    assert (out.returncode, out.stderr) == (141, "")


def test_policy_test_into_a_closed_pipe_ends_quietly(gateway) -> None:
    out = reader_gone(gateway, "policy", "test", str(ROOT / "rego"), "-v", key=AGENT)
    assert (out.returncode, out.stderr) == (141, "")
