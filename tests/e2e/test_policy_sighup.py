"""SIGHUP reloads the policy of a running ``toolgate serve``: the reload runs in a task of its
own (the engines' reload is a coroutine: its I/O off the event loop) and is audited."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.config import hash_api_key
from gateway.testing import GatewayProcess
from tests.conftest import audit_records

API_KEY = "sighup-agent-key"
HEADER = "package toolgate\n\n"
ALLOW = HEADER + 'decision := {"decision": "allow", "reasons": []}\n'
DENY = HEADER + 'decision := {"decision": "deny", "reasons": ["closed"]}\n'


def _config(root: Path) -> Path:
    (root / "bundle").mkdir()
    (root / "bundle" / "policy.rego").write_text(ALLOW)
    raw = {
        "gateway_id": "toolgate-sighup",
        "policy": {"bundle": str(root / "bundle")},
        "identities": [{"name": "agent", "api_key_sha256": hash_api_key(API_KEY), "tenant": "acme", "roles": ["agent"]}],
        "tools": [{"name": "lookup_policy", "input_schema": {"type": "object"}, "risk": {"side_effect": "read"},
                   "executor": {"kind": "python", "callable": "gateway.builtin_tools:lookup_policy"}}],
    }
    path = root / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


async def test_sighup_reloads_the_policy_and_audits_it(tmp_path):
    gw = GatewayProcess(_config(tmp_path), data_dir=tmp_path / "data").start()
    try:
        async with grpc.aio.insecure_channel(gw.address) as channel:
            stub = pb_grpc.ToolGatewayStub(channel)

            async def call() -> str:
                request = pb.ToolCallRequest(tool="lookup_policy", args_json=b'{"topic": "refunds"}')
                answer = await stub.ExecuteTool(request, metadata=(("x-api-key", API_KEY),), timeout=10)
                return answer.WhichOneof("outcome") and (answer.refused.code or "ok")

            assert await call() == "ok"
            (tmp_path / "bundle" / "policy.rego").write_text(DENY)
            gw.proc.send_signal(signal.SIGHUP)
            for _ in range(200):
                if await call() == "policy_denied":
                    break
                await asyncio.sleep(0.05)
            assert await call() == "policy_denied"
    finally:
        gw.stop()
    reloads = [r for r in audit_records(tmp_path / "data" / "audit.jsonl") if r["stage"] == "policy_reload"]
    assert [r["code"] for r in reloads] == ["ok"] and reloads[0]["policy_version"]
