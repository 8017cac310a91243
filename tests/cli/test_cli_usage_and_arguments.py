"""What the CLI refuses before it talks to a gateway: every such error is one line on stderr,
``toolgate: <code>: <message>``, with its documented exit status, never a usage block or a
traceback. The real CLI in subprocesses (``python -m gateway.cli``); where a gateway or a
listening socket is needed, a real one on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli._errors import EXIT
from tests.approvals.approval_helpers import ROOT, write_config

DOWN = "127.0.0.1:1"  # nothing listens there


def cli(*argv: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real CLI with no TOOLGATE_* or GRPC_* variable from the test's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLGATE_", "GRPC_"))}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *map(str, argv)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


def assert_one_error(out: subprocess.CompletedProcess[str], code: str) -> str:
    """stderr is exactly one line ``toolgate: <code>: ...`` and the exit status is the code's (a
    gRPC status not reached: 6); that line."""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"toolgate: {code}: "), out.stderr
    assert out.returncode == EXIT.get(code, 6), (out.returncode, out.stderr)
    return lines[0]


# --- usage errors: one line, usage_error, exit 2 ---------------------------------------------

@pytest.mark.parametrize(("argv", "verb"), [
    (["call"], "toolgate call"),
    (["approvals", "approve", "ap-1"], "toolgate approvals approve"),
    (["approvals", "reject", "ap-1", "--key", "k.pem"], "toolgate approvals reject"),
    (["serve"], "toolgate serve"),
    (["call", "echo", "--step", "abc"], "toolgate call"),
    (["no-such-verb"], "toolgate"),
], ids=["call-without-tool", "approve-without-key", "reject-without-reason", "serve-without-config", "step-abc",
        "unknown-verb"])
def test_a_command_line_that_does_not_parse_is_one_usage_error_line(argv, verb) -> None:
    line = assert_one_error(cli(*argv), "usage_error")
    assert line.endswith(f" (see {verb} --help)"), line


@pytest.mark.parametrize("step", ["2147483648", "99999999999999999999999", "-1", "1.5"])
def test_a_step_outside_int32_from_zero_is_a_usage_error(step) -> None:
    out = cli("call", "echo", "--step", step, "--target", DOWN, "--api-key", "k")
    line = assert_one_error(out, "usage_error")
    assert "--step" in line and "2147483647" in line and "Traceback" not in out.stderr


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "http"])
def test_serve_refuses_a_port_outside_0_to_65535(tmp_path, port) -> None:
    out = cli("serve", "--config", write_config(tmp_path), "--host", "127.0.0.1", f"--port={port}", timeout=30)
    line = assert_one_error(out, "usage_error")
    assert "--port" in line and "65535" in line and "listening" not in out.stdout


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "1e308", "31536001", "soon"])
def test_a_timeout_that_is_not_a_positive_finite_number_of_reasonable_size_is_a_usage_error(timeout) -> None:
    out = cli("approvals", "watch", f"--timeout={timeout}", "--api-key", "x", "--target", DOWN)
    line = assert_one_error(out, "usage_error")
    assert "--timeout" in line and out.stdout == ""


def test_watch_with_the_gateway_down_says_unavailable() -> None:
    out = cli("approvals", "watch", "--timeout", "31536000", "--api-key", "x", "--target", DOWN)
    assert_one_error(out, "unavailable")
    assert out.stdout == ""


def test_an_approval_id_and_a_grant_are_alternatives() -> None:
    out = cli("call", "write_file", "--approval-id", "ap-1", "--grant", "token", "--target", DOWN, "--api-key", "k")
    line = assert_one_error(out, "usage_error")
    assert "--grant" in line and "--approval-id" in line and "not allowed" in line


# --- a malformed target, a TLS file that is no certificate -----------------------------------

@pytest.mark.parametrize("target", ["", "not a target", "127.0.0.1", "127.0.0.1:99999", "localhost:", "unix:",
                                    "127.0.0.1:50051\n"])
def test_a_malformed_target_is_invalid_target_saying_what_is_expected(target) -> None:
    line = assert_one_error(cli("tools", "--target", target, "--api-key", "k"), "invalid_target")
    assert "HOST:PORT" in line and "unix:PATH" in line and "not on this machine" not in line


@pytest.mark.parametrize("target", [DOWN, "localhost:1", "[::1]:1", "unix:/nonexistent/toolgate.sock",
                                    "dns:///localhost:1", "dns:localhost:1"])
def test_a_well_formed_target_is_tried(target) -> None:
    assert_one_error(cli("tools", "--target", target, "--api-key", "k", "--timeout", "5", "--insecure"), "unavailable")


def test_a_ca_file_that_is_no_pem_certificate_is_refused_up_front() -> None:
    out = cli("tools", "--target", DOWN, "--api-key", "k", "--ca-file", ROOT / "README.md")
    line = assert_one_error(out, "tls_ca_file_invalid")
    assert "README.md" in line and "PEM" in line


def test_a_client_certificate_that_is_no_pem_certificate_is_refused_up_front(tmp_path) -> None:
    key = tmp_path / "client_key.pem"
    key.write_text("not a key\n")
    key.chmod(0o600)
    out = cli("tools", "--target", DOWN, "--api-key", "k", "--tls", "--client-cert", ROOT / "README.md",
              "--client-key", key)
    assert_one_error(out, "tls_client_cert_invalid")


def test_grpc_core_logs_nothing_on_a_failed_tls_handshake(tmp_path) -> None:
    """TLS to a gateway that talks plaintext: gRPC's core logs the failed handshake unless told not to."""
    from gateway.testing import GatewayProcess

    gw = GatewayProcess(write_config(tmp_path), data_dir=tmp_path / "data").start()
    try:
        out = cli("tools", "--tls", "--target", gw.address, "--api-key", "demo-agent-key", "--timeout", "5")
    finally:
        gw.stop()
    assert_one_error(out, "unavailable")


# --- serve: a port that cannot be had is one line --------------------------------------------

def test_serve_on_a_port_in_use_is_one_cannot_start_line(tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = cli("serve", "--config", write_config(tmp_path), "--host", "127.0.0.1", "--port", port, timeout=30)
    line = assert_one_error(out, "cannot_start")
    assert f"127.0.0.1:{port}" in line and "in use" in line


# --- audit: a directory is no log ------------------------------------------------------------

@pytest.mark.parametrize("verb", ["search", "verify"])
def test_an_audit_file_that_is_a_directory_is_audit_unreadable(tmp_path: Path, verb) -> None:
    line = assert_one_error(cli("audit", verb, tmp_path), "audit_unreadable")
    assert "is a directory" in line and str(tmp_path) in line


@pytest.mark.parametrize("verb", ["search", "verify"])
def test_an_audit_file_that_does_not_exist_is_still_no_such_file(tmp_path: Path, verb) -> None:
    assert_one_error(cli("audit", verb, tmp_path / "nope.jsonl"), "no_such_file")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e12", "soon"])
def test_the_demos_approval_timeout_is_a_usage_error_unless_0_or_a_number_of_seconds(value) -> None:
    line = assert_one_error(cli("demo", "--approval-timeout", value, "--target", DOWN), "usage_error")
    assert "--approval-timeout" in line and "31536000" in line


def test_a_watch_whose_time_runs_out_before_any_gateway_answers_is_unavailable() -> None:
    """A listener that never speaks HTTP/2 (a wrong port, a stuck proxy): the watch used to end
    as if its --timeout had passed on a live stream, exit 0."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections complete in the kernel, and nothing ever answers them
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        out = cli("approvals", "watch", "--target", target, "--api-key", "k", "--timeout", "1")
    line = assert_one_error(out, "unavailable")
    assert target in line and "--timeout 1s" in line
