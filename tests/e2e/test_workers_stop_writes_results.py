"""SIGTERM to a gateway of several workers: a worker whose caller is still waiting on a long tool
stops that tool and writes its result (``outcome_unknown``: it started) and its claim before it
is killed. With
the calls' grace and the tools' one after the other (10 s and more) past the supervisor's 10 s,
the worker was killed first: no result in the audit log, the claim left ``running``."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
from pathlib import Path

import grpc
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.config import hash_api_key
from gateway.testing import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
KEY = "workers-agent-key"


def _config(root: Path) -> Path:
    raw = {"gateway_id": "w", "workers": 2, "policy": {"bundle": str(ROOT / "rego")},
           "identities": [{"name": "agent", "api_key_sha256": hash_api_key(KEY), "tenant": "acme", "roles": ["agent"]}],
           "tools": [{"name": "sleep", "input_schema": {"type": "object"}, "risk": {"side_effect": "read"},
                      "executor": {"kind": "python", "callable": "gateway.testing:sleep"}, "timeout_seconds": 60}]}
    path = root / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


async def test_a_stopped_worker_writes_the_result_of_a_tool_it_stops(tmp_path):
    gw = GatewayProcess(_config(tmp_path), data_dir=tmp_path / "data").start(60)
    try:
        async with grpc.aio.insecure_channel(gw.address) as channel:
            request = pb.ToolCallRequest(tool="sleep", args_json=b'{"seconds": 40}', idempotency_key="k-1")
            call = asyncio.ensure_future(pb_grpc.ToolGatewayStub(channel).ExecuteTool(
                request, metadata=(("x-api-key", KEY),), timeout=60))
            await asyncio.sleep(1.0)  # running
            began = time.monotonic()
            gw.proc.send_signal(signal.SIGTERM)
            while gw.proc.poll() is None and time.monotonic() - began < 30:
                await asyncio.sleep(0.05)
            assert gw.proc.returncode == 0 and time.monotonic() - began < 9
            await asyncio.gather(call, return_exceptions=True)
    finally:
        gw.stop()
    results = [json.loads(line) for f in sorted((tmp_path / "data").glob("audit*.jsonl"))
               for line in f.read_text().splitlines()]
    assert [r["code"] for r in results if r.get("stage") == "result"] == ["outcome_unknown"]
    with sqlite3.connect(tmp_path / "data" / "toolgate.db") as db:
        [(status, outcome)] = db.execute("SELECT status, outcome FROM claims").fetchall()
    assert status == "done" and "outcome_unknown" in outcome  # what a retry with its key hears
