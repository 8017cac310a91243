"""One audit log, one writer; one port, one gateway (unless its own workers share it).

Two gateways started on one data dir each numbered their records from the same head: the log
they wrote together verified BROKEN ("seq 5 follows 6"). And gRPC binds with SO_REUSEPORT, so a
second gateway on a port in use started too and took half the connections. Both now refuse to
start (``cannot_start``), naming what to change. Real ``toolgate serve`` processes, real calls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.audit import AuditLog
from gateway.audit_file import AuditLogInUse
from gateway.cli import main
from gateway.cli._errors import EXIT
from tests.conftest import AGENT_KEY, DEMO_CONFIG, ROOT


def _config(tmp_path: Path, data: str) -> Path:
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["data_dir"] = str(tmp_path / data)
    raw["policy"]["bundle"] = str(ROOT / "rego")
    path = tmp_path / f"{data}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _serve(config: Path, port: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _listening(proc: subprocess.Popen[str]) -> str:
    first = proc.stdout.readline()
    if not first.startswith("toolgate listening on "):
        proc.kill()
        pytest.fail(f"no gateway: {first!r} {proc.communicate(timeout=30)[1]}")
    return first.split()[-1]


def _refused(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=60)
    assert "listening" not in out and proc.returncode == EXIT["cannot_start"], (out, err)
    return err


def _call(target: str) -> None:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "call", "lookup_policy", "--args", '{"topic": "refunds"}',
                           "--target", target, "--api-key", AGENT_KEY], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.communicate(timeout=30)


def test_a_second_gateway_on_the_same_data_dir_does_not_start(tmp_path, capsys):
    config = _config(tmp_path, "data")
    first = _serve(config)
    try:
        target = _listening(first)
        _call(target)
        err = _refused(_serve(config))  # another port, the same audit log
        assert "cannot_start" in err and "audit.jsonl is in use by another gateway process" in err, err
        assert f"(pid {first.pid})" in err and "TOOLGATE_DATA_DIR" in err, err
        _call(target)  # the first one serves on, unharmed
    finally:
        _stop(first)
    capsys.readouterr()
    assert main(["audit", "verify", str(tmp_path / "data" / "audit.jsonl")]) == 0, capsys.readouterr().out


def test_a_second_gateway_on_a_port_in_use_does_not_start(tmp_path):
    first = _serve(_config(tmp_path, "one"))
    try:
        target = _listening(first)
        port = int(target.rsplit(":", 1)[1])
        err = _refused(_serve(_config(tmp_path, "two"), port))  # its own data dir, the first one's port
        assert f"cannot listen on 127.0.0.1:{port}" in err and "port in use" in err, err
        _call(target)
    finally:
        _stop(first)


def test_workers_still_share_their_port(tmp_path):
    config = _config(tmp_path, "data")
    raw = yaml.safe_load(config.read_text())
    raw["workers"] = 2
    for tool in raw["tools"]:
        tool.pop("max_concurrency", None)  # a per-process cap: refused with workers
    config.write_text(yaml.safe_dump(raw))
    proc = _serve(config)
    try:
        target = _listening(proc)
        for _ in range(4):
            _call(target)
    finally:
        _stop(proc)


def test_the_lock_is_the_logs_for_as_long_as_it_is_open(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    with pytest.raises(AuditLogInUse, match="in use by another gateway process"):
        AuditLog(path)
    log.close()
    AuditLog(path).close()  # closed: free to open again
    assert (tmp_path / "audit.jsonl.lock").read_text().strip().isdigit()


@pytest.mark.asyncio
async def test_a_gateway_that_fails_to_start_lets_go_of_its_log(tmp_path):
    from gateway.app import GatewayApp
    from gateway.config import load_config

    config = load_config(_config(tmp_path, "data"))
    broken = config.model_copy(update={"policy": config.policy.model_copy(update={"bundle": str(tmp_path / "none")})})
    with pytest.raises(Exception, match="no such policy bundle"):
        GatewayApp(broken)
    app = GatewayApp(config)  # the failed start closed the log it had opened
    await app.close()


@pytest.mark.asyncio
async def test_the_server_itself_refuses_a_port_in_use(tmp_path):
    """Not only the CLI's check before it: the gRPC server binds without SO_REUSEPORT."""
    from gateway.config import load_config
    from gateway.server import create_server

    server, port, app = await create_server(load_config(_config(tmp_path, "one")), "127.0.0.1:0")
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            await create_server(load_config(_config(tmp_path, "two")), f"127.0.0.1:{port}")
    finally:
        await server.stop(0)
        await app.close()
    AuditLog(tmp_path / "two" / "audit.jsonl").close()  # the refused one let go of its log


def test_a_rotation_that_cannot_open_the_new_file_still_lets_go_of_the_lock(tmp_path, monkeypatch):
    """A full disk at the rotation's reopen left the log file closed, and close() then returned
    at once: the head and the lock stayed open until the process ended."""
    from gateway import audit_file

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, rotate_bytes=1)
    log.record("request", code="ok")
    append = audit_file._append

    def no_room(name):
        if str(name) == str(path):
            raise OSError(28, "No space left on device")
        return append(name)

    monkeypatch.setattr(audit_file, "_append", no_room)
    with pytest.raises(OSError, match="No space left"):
        log._sink.rotate()
    monkeypatch.undo()
    log.close()
    AuditLog(path).close()  # the lock was let go
