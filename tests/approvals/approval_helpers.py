"""Helpers for the approval tests: the demo config plus a counting write tool, demo approver keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import grpc
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.approvals import tokens
from gateway.approvals.keyring import SigningKey, key_labels, load_private_key
from gateway.testing import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "toolgate.yaml"
KEYS = ROOT / "examples" / "keys"
AGENT, OTHER_TENANT = "demo-agent-key", "other-tenant-key"
APPROVER = {"alice": "alice-approver-key", "bob": "bob-approver-key", "carol": "carol-approver-key"}

COUNT_WRITE = {
    "name": "count_write",
    "description": "a write tool that records each execution (side-effect counter)",
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}, "path": {"type": "string"}}},
    "risk": {"side_effect": "write"},
    "executor": {"kind": "python", "callable": "gateway.testing:count_call"},
    "timeout_seconds": 20,
}


def write_config(tmp_path: Path, **approvals: Any) -> Path:
    """The demo config with absolute paths and the count_write tool, written to tmp_path."""
    raw = yaml.safe_load(DEMO.read_text())
    raw["tools"].append(COUNT_WRITE)
    raw["data_dir"] = str(tmp_path / "data")
    raw["policy"]["bundle"] = str(ROOT / "rego")
    raw["approvals"].update(approvals)
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def private_demo_keys(folder: Path) -> Path:
    """``folder``, holding copies of the demo keys with mode 0600 for the CLI's ``--key``: git keeps
    no file mode but the exec bit, so a fresh clone has the committed keys 0644, which the CLI
    refuses (anyone on the machine could read them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for pem in KEYS.glob("*.pem"):
        copy = folder / pem.name
        copy.write_bytes(pem.read_bytes())
        copy.chmod(0o600)
    return folder


def demo_key(name: str) -> SigningKey:
    pem = (KEYS / f"{name}.pem").read_bytes()
    return SigningKey(key_labels(pem)["kid"], load_private_key(pem))


def approval_token(a: pb.Approval, approver: str, typ: str = tokens.TYP_APPROVAL, **over: Any) -> str:
    now = int(time.time())
    claims = {"iss": approver, "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": a.args_hash,
              "tenant": a.tenant, "run_id": a.run_id, "iat": now, "exp": now + 300, "jti": str(uuid.uuid4())}
    if typ == tokens.TYP_REJECTION:
        claims["reason"] = "not today"
    claims.update(over)
    return tokens.sign(claims, demo_key(approver), typ)


class Clients:
    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.tools = pb_grpc.ToolGatewayStub(self.channel)
        self.approvals = pb_grpc.ApprovalsStub(self.channel)

    @staticmethod
    def md(key: str) -> tuple[tuple[str, str], ...]:
        return (("x-api-key", key),)

    async def call(self, tool: str, args: str, key: str = AGENT, **fields: Any) -> pb.ToolCallResponse:
        return await self.tools.ExecuteTool(pb.ToolCallRequest(tool=tool, args_json=args.encode(), **fields),
                                            metadata=self.md(key), timeout=30)

    async def get(self, approval_id: str, key: str) -> pb.Approval:
        return await self.approvals.Get(pb.GetApprovalRequest(approval_id=approval_id), metadata=self.md(key), timeout=10)

    async def submit(self, a: pb.Approval, approver: str, **over: Any) -> pb.Approval:
        token = approval_token(a, approver, **over)
        return await self.approvals.Submit(pb.SubmitApprovalRequest(approval_id=a.approval_id, token=token),
                                           metadata=self.md(APPROVER[approver]), timeout=10)


@asynccontextmanager
async def serving(config: Path) -> AsyncIterator[tuple[Any, Clients]]:
    """A real gateway for ``config`` on 127.0.0.1 (port 0) and the clients of its roles."""
    from gateway.testing import start_gateway

    running = await start_gateway(config)
    clients = Clients(running.address)
    try:
        yield running, clients
    finally:
        await clients.channel.close()
        await running.stop()


def toolgate(gw: GatewayProcess, *argv: str, key: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess against ``gw`` (a ``gateway.testing.GatewayProcess``) with API key ``key``."""
    env = {**os.environ, "TOOLGATE_TARGET": gw.address, "TOOLGATE_API_KEY": key}
    return subprocess.run([sys.executable, "-m", "gateway.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT)


def pending(gw: GatewayProcess) -> str:
    """A fresh approval request for count_write, made through the CLI as the demo agent: its id."""
    out = toolgate(gw, "call", "count_write", "--args", '{"path": "report.txt", "n": 7}', key="demo-agent-key")
    assert out.returncode == 4, out.stdout + out.stderr
    return json.loads(out.stdout)["approval_id"]


@contextmanager
def gateway_process(tmp: Path, **approvals: Any) -> Iterator[GatewayProcess]:
    """``toolgate serve`` in a subprocess on ``write_config(tmp, **approvals)``, its data under
    ``tmp/data`` (``gw.tmp`` is ``tmp``); stopped on exit."""
    gw = GatewayProcess(write_config(tmp, **approvals), data_dir=tmp / "data").start()
    gw.tmp = tmp
    try:
        yield gw
    finally:
        gw.stop()
