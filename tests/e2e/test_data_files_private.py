"""What the gateway writes is not for others to read: the audit log holds write tools' arguments,
the store approvals' arguments and stored outcomes. Under the common umask 022 the data dir came
out 0755 and the log, its head and the SQLite file 0644. A real gateway, started and called."""

from __future__ import annotations

import os
import stat

import pytest

from gateway.testing import start_gateway
from tests.conftest import Client, demo_config


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_the_data_dir_log_head_lock_and_store_are_closed_to_others(tmp_path, umask_022):
    cfg = demo_config(tmp_path, audit={"rotate_bytes": 4096})
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        for _ in range(20):  # past one rotation
            assert (await client.call("echo", "{}")).code == "ok"
    finally:
        await client.close()
        await running.stop()
    data = cfg.data_path
    assert _mode(data) == 0o750
    made = [p for p in data.iterdir() if p.is_file() and p.name.startswith(("audit.jsonl", "toolgate.db"))]
    names = {p.name for p in made}
    assert {"audit.jsonl", "audit.jsonl.head", "audit.jsonl.lock", "toolgate.db"} <= names, names
    assert any(n.startswith("audit.jsonl.0") for n in names), names  # a rotated file
    assert {p.name: oct(_mode(p)) for p in made if _mode(p) & 0o007 or _mode(p) & 0o020} == {}


async def test_a_file_that_exists_keeps_its_mode(tmp_path, umask_022):
    cfg = demo_config(tmp_path)
    cfg.data_path.mkdir(mode=0o755)
    log = cfg.data_path / "audit.jsonl"
    log.touch(mode=0o644)
    os.chmod(log, 0o644)
    running = await start_gateway(cfg)
    await running.stop()
    assert _mode(cfg.data_path) == 0o755 and _mode(log) == 0o644  # the operator's choice, left as it was
