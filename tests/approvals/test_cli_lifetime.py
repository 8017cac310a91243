"""``approvals approve|reject --lifetime SECONDS``: a gateway whose
``approvals.max_approval_lifetime_seconds`` is below the CLI's default (600 s) refuses the token
with ``approval_lifetime_out_of_range``, naming its bound; the CLI prints that and says to pass a
shorter ``--lifetime``, and with one the approval goes through. A lifetime that is no whole number of seconds in range is refused
before anything is signed. The real CLI in subprocesses against ``toolgate serve`` in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from approval_helpers import APPROVER, gateway_process, pending, toolgate
from gateway.cli._errors import EXIT
from gateway.testing import GatewayProcess

MAX_LIFETIME = 120  # below the CLI's default of 600




def status(gw: GatewayProcess, approval_id: str) -> dict:
    shown = toolgate(gw, "approvals", "show", approval_id, "--json", key=APPROVER["alice"])
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with gateway_process(tmp_path_factory.mktemp("gw"), max_approval_lifetime_seconds=MAX_LIFETIME) as gw:
        yield gw


def test_a_gateway_allowing_less_than_the_default_lifetime_is_answered_with_a_shorter_lifetime(
        gateway, keys: Path) -> None:
    approval_id = pending(gateway)
    approve = ["approvals", "approve", approval_id, "--key", str(keys / "alice.pem"), "--yes"]
    refused = toolgate(gateway, *approve, key=APPROVER["alice"])
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        f"toolgate: approval_lifetime_out_of_range: the token lives 600 s (exp - iat); this gateway accepts approver "
        f"tokens living 1 to {MAX_LIFETIME} s (approvals.max_approval_lifetime_seconds) (sign again with a "
        "--lifetime within it, e.g. --lifetime 60, which every gateway accepts)")
    assert status(gateway, approval_id)["approvers"] == []  # nothing counted
    done = toolgate(gateway, *approve, "--lifetime", str(MAX_LIFETIME), key=APPROVER["alice"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "approved"


def test_reject_takes_a_lifetime_too(gateway, keys: Path) -> None:
    approval_id = pending(gateway)
    rejected = toolgate(gateway, "approvals", "reject", approval_id, "--key", str(keys / "bob.pem"), "--reason",
                        "wrong file", "--lifetime", "60", "--yes", key=APPROVER["bob"])
    assert rejected.returncode == 0, rejected.stderr
    assert status(gateway, approval_id)["status"] == "rejected"


def test_a_refusal_of_a_short_lived_token_does_not_blame_the_lifetime(gateway, keys: Path) -> None:
    """60 s is within every gateway's limit: the hint names the other causes only."""
    wrong_key = toolgate(gateway, "approvals", "approve", pending(gateway), "--key", str(keys / "bob.pem"),
                         "--lifetime", "60", "--yes", key=APPROVER["alice"])
    last = wrong_key.stderr.splitlines()[-1]
    assert wrong_key.returncode == 3 and last.startswith("toolgate: invalid_approval: "), wrong_key.stderr
    assert "--lifetime" not in last and "--key" in last


@pytest.mark.parametrize("lifetime", ["0", "-5", "1.5", "ten", "", " 60", "\uff16\uff10", "86401", "9" * 5000])
def test_a_lifetime_that_is_no_whole_number_of_seconds_in_range_is_refused_before_signing(
        gateway, keys: Path, lifetime: str) -> None:
    approval_id = pending(gateway)
    out = toolgate(gateway, "approvals", "approve", approval_id, "--key", str(keys / "alice.pem"),
                   f"--lifetime={lifetime}", "--yes", key=APPROVER["alice"])
    assert out.returncode == EXIT["invalid_lifetime"] == 2, out.stderr
    assert out.stderr.startswith("toolgate: invalid_lifetime: --lifetime "), out.stderr
    assert len(out.stderr.splitlines()) == 1 and "max_approval_lifetime_seconds" in out.stderr
    assert out.stdout == ""  # refused before fetching the request: nothing shown, signed or sent
    assert status(gateway, approval_id)["status"] == "pending"
