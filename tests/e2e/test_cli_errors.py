"""Every error of the CLI is one line ``toolgate: <code>: <message>`` with a stable snake_case
code and its documented exit status, and what a gateway says in an error cannot draw on the
terminal. The CLI runs in-process (``gateway.cli.main``) against real files and, for the
approver's verbs, a real gRPC server on 127.0.0.1 port 0 standing in for a gateway that lies
or sends hostile details (the real one never does: that is what the client must not trust)."""

from __future__ import annotations

import io
import json
import re
import unicodedata
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.approvals.keyring import write_private_key
from gateway.arguments import args_hash, parse_strict
from gateway.cli import main
from gateway.cli._errors import EXIT
from tests.approvals.approval_helpers import private_demo_keys
from tests.conftest import ROOT

HOSTILE = "\u009b2J\u009b31mall clear\u202eevil\u200b\u2028\x1b[8m"  # CSI, bidi override, zero width, ESC
ERROR_LINE = re.compile(r"^toolgate: ([a-z][a-z0-9_]*): \S")
EMPTY_HASH = args_hash(parse_strict(b"{}", max_bytes=16))


def _drawing(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on or that hide what is there."""
    return [c for c in text if c != "\n" and (unicodedata.category(c)[0] == "C"
                                              or unicodedata.category(c) in ("Zl", "Zp"))]


def toolgate(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_error(code: int, err: str, expected: str) -> None:
    """The last line of stderr is ``toolgate: <expected>: ...`` and the exit status is the code's."""
    last = err.splitlines()[-1] if err else ""
    match = ERROR_LINE.match(last)
    assert match and match[1] == expected, err
    assert code == EXIT.get(expected, code) and code != 0, (code, err)


class StandIn(pb_grpc.ApprovalsServicer):
    """A gateway's Approvals service that answers as the test says and records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.get_error: tuple[grpc.StatusCode, str] | None = None
        self.submit_details = "refused"
        self.approval = pb.Approval(approval_id="ap-1", status="pending", tool="write_file", tenant="acme",
                                    args_json=b"{}", args_hash=EMPTY_HASH, audience="gw-1",
                                    quorum=1)
        self.approval.expires_at.seconds = 4_000_000_000

    def Get(self, request, context):
        self.calls.append("Get")
        if self.get_error:
            context.abort(*self.get_error)
        return self.approval

    def Submit(self, request, context):
        self.calls.append("Submit")
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, self.submit_details)

    def Reject(self, request, context):
        self.calls.append("Reject")
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, self.submit_details)


@pytest.fixture
def stand_in():
    servicer = StandIn()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_ApprovalsServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.target = f"127.0.0.1:{port}"
    try:
        yield servicer
    finally:
        server.stop(0)


@pytest.fixture
def alice(tmp_path: Path) -> Path:
    """The demo approver's key, a 0600 copy (a fresh clone has the committed one 0644)."""
    return private_demo_keys(tmp_path / "keys") / "alice.pem"


def _approve(stand_in: StandIn, *extra: object) -> list[object]:
    return ["approvals", "approve", "ap-1", "--target", stand_in.target, "--api-key", "k", "--timeout", "10", *extra]


# --- what a gateway says is escaped ----------------------------------------------------------

@pytest.mark.parametrize("details", ['{"code": ' + "[" * 5000, "[" * 5000])
def test_details_nested_past_the_parsers_depth_are_one_error_line(capsys, stand_in, details) -> None:
    """Every RPC error's details are tried as the gateway's {"code", "message"}: a reply nested
    deeper than Python's recursion limit was a RecursionError traceback, exit 1."""
    stand_in.get_error = (grpc.StatusCode.FAILED_PRECONDITION, details)
    code, _, err = toolgate(capsys, "approvals", "show", "ap-1", "--target", stand_in.target, "--api-key", "k")
    assert code == 3 and err.startswith("toolgate: failed_precondition: ") and len(err.splitlines()) == 1, err[:300]


def test_an_rpc_errors_details_cannot_draw_on_the_terminal(capsys, stand_in) -> None:
    stand_in.get_error = (grpc.StatusCode.NOT_FOUND, HOSTILE)
    code, _, err = toolgate(capsys, "approvals", "show", "ap-1", "--target", stand_in.target, "--api-key", "k")
    assert code == 3 and err.startswith("toolgate: not_found: "), err  # refused by the gateway
    assert _drawing(err) == [], ascii(err)
    assert "\\u009b2J" in err and "\\u202e" in err  # what was sent, escaped


@pytest.mark.parametrize(("details", "expected"), [
    (HOSTILE, "refused"),
    (json.dumps({"code": "approval_rejected", "message": HOSTILE}, ensure_ascii=False), "approval_rejected"),
    (json.dumps({"code": "x\u202e\x1b[2J", "message": "m"}, ensure_ascii=False), "refused"),
], ids=["plain-text", "code-and-message", "hostile-code"])
def test_a_refusals_details_cannot_draw_on_the_terminal(capsys, stand_in, alice, details, expected) -> None:
    stand_in.submit_details = details
    code, _, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--yes"))
    assert stand_in.calls == ["Get", "Submit"]
    assert code == 3 and err.splitlines()[-1].startswith(f"toolgate: {expected}: "), err
    assert _drawing(err) == [], ascii(err)


# --- every error has a code ------------------------------------------------------------------

def _encrypted_key(tmp_path: Path, passphrase: bytes) -> Path:
    path = tmp_path / "dora.pem"
    write_private_key(path, Ed25519PrivateKey.generate(), passphrase, {"approver": "dora", "kid": "dora-1"})
    return path


def test_approve_refuses_an_unset_passphrase_env_instead_of_an_empty_passphrase(
        capsys, stand_in, alice, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TOOLGATE_TEST_UNSET", raising=False)
    for key in (alice, _encrypted_key(tmp_path, b"s3cret")):
        code, _, err = toolgate(capsys, *_approve(stand_in, "--key", key, "--passphrase-env", "TOOLGATE_TEST_UNSET",
                                                  "--yes"))
        assert_error(code, err, "passphrase_env_unset")
        assert code == 2 and "TOOLGATE_TEST_UNSET" in err
    monkeypatch.setenv("TOOLGATE_TEST_UNSET", "")
    code, _, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--passphrase-env", "TOOLGATE_TEST_UNSET"))
    assert_error(code, err, "passphrase_env_unset")
    assert stand_in.calls == []  # refused before asking the gateway anything


def test_approve_names_what_is_wrong_with_the_key(capsys, stand_in, alice, tmp_path, monkeypatch) -> None:
    encrypted = _encrypted_key(tmp_path, b"s3cret")
    monkeypatch.setenv("TOOLGATE_TEST_PASS", "wrong")
    unlabelled = tmp_path / "plain.pem"
    unlabelled.write_bytes(b"".join(line for line in alice.read_bytes().splitlines(keepends=True)
                                    if not line.startswith(b"toolgate-")))
    unlabelled.chmod(0o600)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"toolgate-approver: a\ntoolgate-kid: k\nnot a key\n")
    garbage.chmod(0o600)
    readable = tmp_path / "readable.pem"
    readable.write_bytes(alice.read_bytes())
    readable.chmod(0o644)
    cases = [
        (["--key", tmp_path / "missing.pem"], "key_file_not_found"),
        (["--key", encrypted, "--passphrase-env", "TOOLGATE_TEST_PASS"], "key_passphrase_wrong"),
        (["--key", encrypted], "key_passphrase_needed"),
        (["--key", alice, "--passphrase-env", "TOOLGATE_TEST_PASS"], "key_not_encrypted"),
        (["--key", unlabelled], "key_labels_missing"),
        (["--key", garbage], "key_invalid"),
        (["--key", readable], "key_file_readable"),
    ]
    for extra, expected in cases:
        code, _, err = toolgate(capsys, *_approve(stand_in, *extra, "--yes"))
        assert_error(code, err, expected)
    assert stand_in.calls == []


def test_approve_refusing_to_sign_says_why_with_a_code(capsys, stand_in, alice, monkeypatch) -> None:
    stand_in.approval.args_hash = "sha256:" + "0" * 64  # a gateway whose hash is not the arguments'
    code, _, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--yes"))
    assert_error(code, err, "args_hash_mismatch")
    stand_in.approval.args_json = b'{"a": 1, "a": 2}'
    code, _, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--yes"))
    assert_error(code, err, "args_not_strict_json")
    stand_in.approval.args_json, stand_in.approval.args_hash = b"{}", EMPTY_HASH
    code, _, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--yes", "--audience", "gw-2"))
    assert_error(code, err, "audience_mismatch")
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, _, err = toolgate(capsys, *_approve(stand_in, "--key", alice))
    assert_error(code, err, "not_confirmed")
    assert "Submit" not in stand_in.calls and code == 3


def test_arguments_that_are_not_utf8_are_shown_escaped_and_not_signed(capsys, stand_in, alice) -> None:
    """The real gateway stores text; one that lies can send any bytes: shown, marked, never signed."""
    stand_in.approval.args_json = b'{"path": "caf\xc3\xa9 \xff\x1b[2J"}'
    code, out, err = toolgate(capsys, "approvals", "show", "ap-1", "--json", "--target", stand_in.target,
                              "--api-key", "k")
    record = json.loads(out)
    assert code == 0 and record["args"] is None and "not valid UTF-8" in record["args_malformed"], err
    assert record["args_raw"] == '{"path": "caf\\u00e9 \\xff\x1b[2J"}'  # a character, a byte: told apart
    code, out, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--yes"))
    assert_error(code, err, "args_not_strict_json")
    assert "MALFORMED" in out and _drawing(out) == [] and "Submit" not in stand_in.calls


def test_errors_without_a_gateway_have_codes(capsys, tmp_path, monkeypatch) -> None:
    broken_bundle = tmp_path / "bundle"
    broken_bundle.mkdir()
    (broken_bundle / "p.rego").write_text("package toolgate\nx := \n")
    corrupt = tmp_path / "audit.jsonl"
    corrupt.write_text("{not json\n")
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("gateway_id: caf\u00e9\n".encode("latin-1"))
    monkeypatch.delenv("TOOLGATE_TEST_UNSET", raising=False)
    cases = [
        (["audit", "verify", tmp_path / "nope.jsonl"], "no_such_file"),
        (["audit", "search", tmp_path / "nope.jsonl"], "no_such_file"),
        (["keys", "new", "--approver", "bad id!", "--out", tmp_path], "invalid_approver_id"),
        (["keys", "new", "--approver", "dora", "--out", tmp_path, "--passphrase-env", "TOOLGATE_TEST_UNSET"],
         "passphrase_env_unset"),
        (["policy", "check", broken_bundle], "policy_bundle_invalid"),
        (["policy", "test", broken_bundle], "policy_bundle_invalid"),
        (["policy", "replay", "--audit", corrupt, "--policy", ROOT / "rego"], "audit_malformed"),
        (["policy", "replay", "--audit", tmp_path, "--policy", ROOT / "rego"], "audit_unreadable"),
        (["serve", "--config", tmp_path / "nope.yaml"], "config_invalid"),
        (["serve", "--config", tmp_path], "config_invalid"),  # a folder
        (["serve", "--config", latin1], "config_invalid"),  # not UTF-8
        (["keys", "new", "--approver", "dora", "--out", corrupt], "key_dir_unwritable"),  # a file, not a folder
    ]
    for argv, expected in cases:
        code, out, err = toolgate(capsys, *argv)
        assert_error(code, err, expected)
        assert code == 2 and "error" not in out, (argv, out)
    assert not list(tmp_path.glob("dora-*.pem"))  # keys new wrote nothing


@pytest.mark.parametrize("key", ["clé-demo", "key\x1b[2J", "key\n"])
def test_an_api_key_grpc_cannot_carry_is_a_usage_error_before_any_call(capsys, stand_in, key) -> None:
    code, _out, err = toolgate(capsys, "approvals", "show", "ap-1", "--target", stand_in.target, "--api-key", key)
    assert_error(code, err, "api_key_invalid")
    assert "\x1b" not in err and stand_in.calls == []


def test_a_refusal_code_with_a_final_newline_is_not_taken_for_a_code(capsys, stand_in, alice) -> None:
    stand_in.submit_details = json.dumps({"code": "approval_pending\n", "message": "m"})
    code, _out, err = toolgate(capsys, *_approve(stand_in, "--key", alice, "--yes"))
    assert err.splitlines()[-1].startswith("toolgate: refused: ") and code == 3, err


def test_an_approver_id_with_a_final_newline_is_refused(capsys, tmp_path) -> None:
    code, _out, err = toolgate(capsys, "keys", "new", "--approver", "alice\n", "--out", tmp_path)
    assert_error(code, err, "invalid_approver_id")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("half", [["--client-key", "k.pem"], ["--client-cert", "c.pem"],
                                  ["--ca-file", "ca.pem", "--client-cert", "c.pem"]])
def test_a_client_key_without_its_certificate_or_the_other_way_round_is_refused(capsys, stand_in, half) -> None:
    """gRPC takes either alone and then sends no certificate; a lone --client-key used to mean plaintext."""
    code, _out, err = toolgate(capsys, "approvals", "show", "ap-1", "--target", stand_in.target, "--api-key", "k", *half)
    assert_error(code, err, "client_cert_incomplete")
    assert stand_in.calls == []
