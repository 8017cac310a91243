"""Three real gateway processes (``toolgate serve``) sharing one PostgreSQL database.

Each replica has its own data dir and audit log; the counting tool's side effect goes to one
shared file, so executions are counted across replicas. Policy is inline Rego (below).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway._proto.toolgate.v1 import gateway_pb2 as pb  # noqa: E402
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from gateway.approvals.keyring import write_private_key  # noqa: E402
from gateway.testing import GatewayProcess  # noqa: E402
from tests._postgres import PostgresServer, pg_server  # noqa: E402,F401  (fixture)

HERE = Path(__file__).resolve().parent
AGENT_KEY = "demo-agent-key"  # the demo identities: examples/toolgate.yaml
APPROVER_KEYS = {"alice": "alice-approver-key", "bob": "bob-approver-key"}
N_REPLICAS = 3

POLICY = """
package toolgate

import rego.v1

default visible := true

default decision := {"decision": "deny", "reasons": ["no rule permits this call"]}

decision := {"decision": "allow", "reasons": ["counting is harmless"]} if input.tool.name == "count_shared"

decision := {
	"decision": "require_approval", "reasons": ["approved counting needs ops"],
	"approval": {"groups_any": ["ops"], "quorum": 1, "ttl_seconds": 600},
} if {
	input.tool.name == "count_approved"
	not input.approval
}

decision := {"decision": "allow", "reasons": ["ops approved"]} if {
	input.tool.name == "count_approved"
	input.approval
}
"""


def _tool(name: str, counter: Path, *, side_effect: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": "appends one line per execution to a file shared by the replicas",
        "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        "risk": {"side_effect": side_effect},
        "constraints": {"counter": str(counter), "delay": 0.3},
        "executor": {"kind": "python", "callable": "_replica_tools:count_shared"},
        "timeout_seconds": 2,
    }


def write_config(root: Path, dsn: str) -> Path:
    """Our policy, tools and store; the demo's identities and approver keyring; one grant key
    file shared by the replicas (a grant issued by one verifies on all)."""
    demo = yaml.safe_load((ROOT / "examples" / "toolgate.yaml").read_text())
    grant_key = root / "shared" / "grant-signing.pem"
    (root / "shared").mkdir(parents=True, exist_ok=True)
    if not grant_key.exists():
        write_private_key(grant_key, Ed25519PrivateKey.generate())
    (root / "policy").mkdir(parents=True, exist_ok=True)
    (root / "policy" / "replicas.rego").write_text(POLICY)
    counter = root / "shared" / "executions.jsonl"
    raw: dict[str, Any] = {
        "gateway_id": "toolgate-replicas",
        "listen": "127.0.0.1:0",
        "policy": {"engine": "embedded", "bundle": "policy"},
        "store": {"kind": "postgres", "dsn": dsn},
        "identities": demo["identities"],
        "tools": [_tool("count_shared", counter, side_effect="read"), _tool("count_approved", counter, side_effect="write")],
        "approvals": {**demo["approvals"], "grant_keys": [str(grant_key)]},
    }
    path = root / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


class Client:
    """Raw async gRPC stubs to one replica: tool calls as the demo agent, approvals as anyone."""

    def __init__(self, address: str, api_key: str = AGENT_KEY) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = pb_grpc.ToolGatewayStub(self.channel)
        self.approvals = pb_grpc.ApprovalsStub(self.channel)
        self.metadata = (("x-api-key", api_key),)

    async def call(self, tool: str, args: dict[str, Any], *, timeout: float = 30, **fields: Any) -> pb.ToolCallResponse:
        request = pb.ToolCallRequest(tool=tool, args_json=json.dumps(args).encode(), **fields)
        return await self.stub.ExecuteTool(request, metadata=self.metadata, timeout=timeout)

    async def get(self, approval_id: str, as_: str = "") -> pb.Approval:
        md = (("x-api-key", APPROVER_KEYS[as_]),) if as_ else self.metadata
        return await self.approvals.Get(pb.GetApprovalRequest(approval_id=approval_id), metadata=md, timeout=10)

    def watch(self, approval_id: str = "", *, as_: str = "", include_current: bool = False, timeout: float = 60):
        """An ``Approvals.Watch`` stream: one request's (as the agent) or, with ``as_``, every request."""
        md = (("x-api-key", APPROVER_KEYS[as_]),) if as_ else self.metadata
        request = pb.WatchApprovalsRequest(approval_id=approval_id, include_current=include_current)
        return self.approvals.Watch(request, metadata=md, timeout=timeout)

    async def approve(self, a: pb.Approval, approver: str) -> pb.Approval:
        """Sign an approval of ``a`` with the demo approver's key (as the CLI does) and submit it."""
        token = sign_approval(a, approver)
        return await self.approvals.Submit(
            pb.SubmitApprovalRequest(approval_id=a.approval_id, token=token),
            metadata=(("x-api-key", APPROVER_KEYS[approver]),), timeout=10,
        )

    async def close(self) -> None:
        await self.channel.close()


def sign_approval(a: pb.Approval, approver: str) -> str:
    from gateway.approvals import tokens
    from gateway.approvals.keyring import SigningKey, key_labels, load_private_key

    pem = (ROOT / "examples" / "keys" / f"{approver}.pem").read_bytes()
    now = int(time.time())
    claims = {"iss": approver, "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": a.args_hash,
              "tenant": a.tenant, "run_id": a.run_id, "iat": now, "exp": now + 300, "jti": str(uuid.uuid4())}
    return tokens.sign(claims, SigningKey(key_labels(pem)["kid"], load_private_key(pem)), tokens.TYP_APPROVAL)


@dataclass
class Cluster:
    root: Path
    dsn: str
    server: PostgresServer
    replicas: list[GatewayProcess]
    counter: Path
    logs: list[list[str]]

    def data_dir(self, i: int) -> Path:
        return self.root / f"replica-{i}"

    def audit(self, i: int) -> list[dict[str, Any]]:
        path = self.data_dir(i) / "audit.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def executions(self, key: str | None = None) -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in self.counter.read_text().splitlines()] if self.counter.exists() else []
        return [x for x in lines if key is None or x["args"]["key"] == key]

    def alive(self) -> bool:
        return all(r.proc is not None and r.proc.poll() is None for r in self.replicas)


def start_cluster(root: Path, server: PostgresServer) -> Cluster:
    dsn = server.create_database("replicas")
    config = write_config(root, dsn)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH", "")]))}
    replicas = [GatewayProcess(config, data_dir=root / f"replica-{i}", env=env) for i in range(N_REPLICAS)]
    with ThreadPoolExecutor(N_REPLICAS) as pool:
        started = [pool.submit(r.start, 60.0) for r in replicas]
        try:
            for f in started:
                f.result()
        except BaseException:
            for r in replicas:
                r.stop()
            raise
    return Cluster(root, dsn, server, replicas, root / "shared" / "executions.jsonl", [_drain(r) for r in replicas])


def _drain(replica: GatewayProcess) -> list[str]:
    """Keep reading the replica's output (stdout + stderr) so a full pipe never blocks it."""
    lines: list[str] = []
    stream = replica.proc.stdout if replica.proc else None
    if stream is not None:
        threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    return lines


@pytest.fixture(scope="session")
def cluster(pg_server, tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("replicas"), pg_server)
    yield c
    for r in c.replicas:
        r.stop()


@pytest.fixture
async def clients(cluster):
    cs = [Client(r.address) for r in cluster.replicas]
    yield cs
    await asyncio.gather(*(c.close() for c in cs))
