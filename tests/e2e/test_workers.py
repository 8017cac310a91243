"""``workers: 2``: two gateway processes behind one port, on one SQLite store (gateway.workers).

A real ``toolgate serve`` supervisor and its workers; clients on many channels (the kernel
spreads connections, not calls). The counting tool appends to one shared file, so executions
are counted across workers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.audit_sign import read_public_keys
from gateway.audit_verify import verify_file
from gateway.config import Config, hash_api_key
from gateway.testing import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "tests" / "replicas"  # _replica_tools.count_shared
API_KEY = "workers-agent-key"
CHANNELS = 16


def write_config(root: Path, **extra: Any) -> Path:
    raw: dict[str, Any] = {
        "gateway_id": "toolgate-workers",
        "workers": 2,
        "policy": {"bundle": str(ROOT / "rego")},
        "identities": [{"name": "agent", "api_key_sha256": hash_api_key(API_KEY), "tenant": "acme", "roles": ["agent"]}],
        "tools": [{
            "name": "count_shared",
            "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
            "risk": {"side_effect": "read"},
            "constraints": {"counter": str(root / "executions.jsonl"), "delay": 0.3},
            "executor": {"kind": "python", "callable": "_replica_tools:count_shared"},
            "timeout_seconds": 5,
        }],
        **extra,
    }
    path = root / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def executions(root: Path, key: str) -> int:
    counter = root / "executions.jsonl"
    lines = counter.read_text().splitlines() if counter.exists() else []
    return sum(1 for x in lines if json.loads(x)["args"]["key"] == key)


def workers_of(supervisor: subprocess.Popen[str]) -> list[int]:
    """The worker pids (children running multiprocessing's spawn entry, not its resource tracker)."""
    out = subprocess.run(["pgrep", "-P", str(supervisor.pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]


@pytest.fixture
def gateway(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH", "")]))}
    gw = GatewayProcess(write_config(tmp_path), data_dir=tmp_path / "data", env=env).start(60.0)
    yield gw, tmp_path
    gw.stop()


async def call_on_channels(address: str, key: str, *, idempotency_key: str = "") -> list[pb.ToolCallResponse]:
    """One call per channel, all at once; each channel is its own connection."""
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(CHANNELS)]
    try:
        request = pb.ToolCallRequest(tool="count_shared", args_json=json.dumps({"key": key}).encode(),
                                     idempotency_key=idempotency_key)
        return await asyncio.gather(*(
            pb_grpc.ToolGatewayStub(c).ExecuteTool(request, metadata=(("x-api-key", API_KEY),), timeout=30)
            for c in channels
        ))
    finally:
        for c in channels:
            await c.close()


def test_two_workers_serve_one_port_each_with_its_own_audit_chain(gateway):
    gw, root = gateway
    assert len(workers_of(gw.proc)) == 2
    for _ in range(3):
        answers = asyncio.run(call_on_channels(gw.address, f"spread-{uuid.uuid4()}"))
        assert {a.code for a in answers} == {"ok"}
    gw.stop()  # flush and close both chains
    assert gw.proc.returncode == 0
    logs = sorted((root / "data").glob("audit.w*.jsonl"))
    assert [p.name for p in logs] == ["audit.w0.jsonl", "audit.w1.jsonl"]
    results = 0
    for log in logs:
        report = verify_file(log)
        assert report.ok, (log.name, report)
        results += sum(1 for line in log.read_text().splitlines() if json.loads(line)["stage"] == "result")
    assert results == 3 * CHANNELS
    served = [sum(1 for line in log.read_text().splitlines() if json.loads(line)["stage"] == "result") for log in logs]
    assert all(n > 0 for n in served), f"one worker served nothing: {served}"


def test_two_workers_sign_their_own_chains_with_the_key_the_supervisor_made(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH", "")]))}
    config = write_config(tmp_path, audit={"signing_key": "audit-signing.pem", "checkpoint_seconds": 0.2})
    gw = GatewayProcess(config, data_dir=tmp_path / "data", env=env).start(60.0)
    try:
        for _ in range(2):
            assert {a.code for a in asyncio.run(call_on_channels(gw.address, f"signed-{uuid.uuid4()}"))} == {"ok"}
    finally:
        gw.stop()
    assert gw.proc.returncode == 0
    data = tmp_path / "data"
    assert sorted(p.name for p in data.glob("audit-signing.pem*")) == ["audit-signing.pem", "audit-signing.pem.pub"]
    keys = read_public_keys([str(data / "audit-signing.pem.pub")])
    for log in sorted(data.glob("audit.w*.jsonl")):
        report = verify_file(log, keys)
        assert report.ok and report.checkpoints >= 1 and report.signed_seq == report.last_seq, (log.name, report)


def test_one_idempotency_key_on_both_workers_executes_once(gateway):
    gw, root = gateway
    key = f"once-{uuid.uuid4()}"
    answers = asyncio.run(call_on_channels(gw.address, key, idempotency_key=key))
    assert executions(root, key) == 1
    assert {a.code for a in answers} == {"ok"}
    assert len({a.decision_id for a in answers}) == 1  # every other caller got the stored outcome
    assert sum(a.replayed for a in answers) == CHANNELS - 1


def test_a_worker_that_dies_stops_the_gateway(gateway):
    gw, _ = gateway
    victim, other = workers_of(gw.proc)
    os.kill(victim, signal.SIGKILL)
    assert gw.proc.wait(30) == 1
    time.sleep(0.2)
    assert not Path(f"/proc/{other}").exists() or "Z" in Path(f"/proc/{other}/stat").read_text().split()[2]


def test_sigterm_stops_every_worker(gateway):
    gw, _ = gateway
    pids = workers_of(gw.proc)
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(30) == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()


def test_config_refuses_what_workers_cannot_enforce():
    tool = {"name": "t", "risk": {"side_effect": "read"}, "executor": {"kind": "python", "callable": "m:f"}}
    with pytest.raises(ValueError, match="max_concurrency"):
        Config.model_validate({"workers": 2, "tools": [{**tool, "max_concurrency": 4}]})
    with pytest.raises(ValueError, match="metrics_port"):
        Config.model_validate({"workers": 2, "observability": {"metrics_port": 9464}})
    assert Config.model_validate({"workers": 1, "tools": [{**tool, "max_concurrency": 4}]}).workers == 1
