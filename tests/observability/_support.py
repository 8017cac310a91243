"""Helpers: a config with inline Rego and a SQLite store, and a raw gRPC client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.config import Config, hash_api_key

AGENT_KEY = "observability-agent-key"

POLICY = """
package toolgate

import rego.v1

default visible := true

default decision := {"decision": "deny", "reasons": ["not echo"]}

decision := {"decision": "allow", "reasons": ["echo is harmless"]} if input.tool.name == "echo"
"""


def make_config(tmp_path: Path, **observability: Any) -> Config:
    (tmp_path / "policy").mkdir(exist_ok=True)
    (tmp_path / "policy" / "p.rego").write_text(POLICY)
    return Config.model_validate({
        "gateway_id": "toolgate-observability",
        "data_dir": str(tmp_path / "data"),
        "policy": {"bundle": str(tmp_path / "policy")},
        "identities": [{"name": "a", "api_key_sha256": hash_api_key(AGENT_KEY), "tenant": "acme", "agent": "a"}],
        "tools": [
            {"name": name, "risk": {"side_effect": "none"}, "executor": {"kind": "python", "callable": "gateway.testing:echo"}}
            for name in ("echo", "echo_denied")
        ],
        "observability": observability,
        "base_dir": str(tmp_path),
    })


class Client:
    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = pb_grpc.ToolGatewayStub(self.channel)

    async def call(self, tool: str, args: dict[str, Any], **fields: Any) -> pb.ToolCallResponse:
        request = pb.ToolCallRequest(tool=tool, args_json=json.dumps(args).encode(), **fields)
        return await self.stub.ExecuteTool(request, metadata=(("x-api-key", AGENT_KEY),), timeout=10)

    async def close(self) -> None:
        await self.channel.close()
