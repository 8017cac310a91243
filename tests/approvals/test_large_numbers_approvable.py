"""A number past ±(2^53-1) that the gateway accepts can be approved with the CLI.

RFC 8785 writes the double 1e20 as ``100000000000000000000``: the approval record carries the
arguments in that form, and the approver's CLI must read it back as the same number (not refuse
it as an unsafe integer, which left such a request impossible to approve).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from approval_helpers import APPROVER, toolgate
from gateway.testing import GatewayProcess, calls_recorded



def _call(gw: GatewayProcess, args: str, *extra: str) -> tuple[int, dict]:
    out = toolgate(gw, "call", "count_write", "--args", args, "--run-id", "run-big", *extra, key="demo-agent-key")
    return out.returncode, json.loads(out.stdout)


@pytest.mark.parametrize(("sent", "value"), [
    ('{"path": "a.txt", "n": 1e20}', 1e20),
    ('{"path": "a.txt", "n": 9007199254740994.0}', 2.0**53 + 2),
    ('{"path": "a.txt", "n": 100000000000000000000}', 1e20),
])
def test_a_number_past_2_53_is_shown_approved_and_runs(gateway: GatewayProcess, keys: Path, tmp_path: Path,
                                                       sent: str, value: float) -> None:
    rc, out = _call(gateway, sent)
    assert (rc, out["code"]) == (4, "approval_required"), out
    approval_id = out["approval_id"]
    shown = toolgate(gateway, "approvals", "show", approval_id, "--json", key=APPROVER["alice"])
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["args"]["n"] == value
    done = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes",
                    key=APPROVER["alice"])
    assert done.returncode == 0, done.stderr
    rc, ran = _call(gateway, sent, "--approval-id", approval_id)
    assert (rc, ran["code"]) == (0, "ok"), ran
    assert calls_recorded(tmp_path / "data" / "sandbox", "count_write") == 1


def test_an_integer_that_is_not_exactly_a_double_is_still_refused(gateway: GatewayProcess) -> None:
    rc, out = _call(gateway, '{"path": "a.txt", "n": 9007199254740993}')
    assert out["code"] == "invalid_arguments" and "outside ±(2^53-1)" in json.dumps(out, ensure_ascii=False)
