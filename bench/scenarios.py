"""What is measured: the gateway config, the payloads and one request per scenario.

Every gateway scenario runs the full call path: API-key authentication, strict JSON parse,
JSON Schema validation, RFC 8785 args hash, an idempotency claim in SQLite (each request
carries a fresh key), the Rego decision, execution, normalisation and the chained audit
log. The echo baseline receives the very same args bytes.

The ``grant`` scenario calls ``noop_write`` (side effect ``write``: the default bundle asks
for one ``ops`` approval) presenting a grant made before the timed window; see bench.grants.
Its approver is ``bench-ops``, whose Ed25519 key is generated per run (``approver_key``).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway._proto.toolgate.v1 import gateway_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
GATEWAY_ID = "toolgate-bench"
TENANT, AGENT = "bench", "bench-agent"
API_KEY = "bench-agent-key"
METADATA = (("x-api-key", API_KEY),)
APPROVER, APPROVER_KID = "bench-ops", "bench-ops-1"
APPROVER_METADATA = (("x-api-key", "bench-approver-key"),)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "maxLength": 1024},
        "n": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 32}, "maxItems": 8},
    },
    "required": ["text", "n"],
    "additionalProperties": False,
}
ARGS: dict[str, Any] = {"text": "the quick brown fox jumps over the lazy dog " * 5, "n": 7, "tags": ["bench", "allow"]}
BAD_ARGS: dict[str, Any] = {**ARGS, "n": "seven", "extra": True}


@dataclass(frozen=True)
class Scenario:
    name: str
    server: str  # which server process: echo | embedded | opa
    tool: str
    args: dict[str, Any]
    expect: str  # the response code every call must return


SCENARIOS = {
    "echo": Scenario("echo", "echo", "noop", ARGS, "ok"),
    "allow": Scenario("allow", "embedded", "noop", ARGS, "ok"),
    "deny": Scenario("deny", "embedded", "wipe", ARGS, "policy_denied"),
    "invalid": Scenario("invalid", "embedded", "noop", BAD_ARGS, "invalid_arguments"),
    "opa_allow": Scenario("opa_allow", "opa", "noop", ARGS, "ok"),
    "grant": Scenario("grant", "embedded", "noop_write", ARGS, "ok"),
}

_keys = itertools.count()
_prefix = os.urandom(4).hex()


def request(scenario: Scenario) -> pb.ToolCallRequest:
    """One request; a fresh idempotency key each time so every call claims and executes."""
    return pb.ToolCallRequest(
        tool=scenario.tool,
        args_json=args_json(scenario.name, scenario.args),
        run_id="bench-run",
        step=1,
        idempotency_key=idempotency_key(),
    )


def idempotency_key() -> str:
    """A key never sent before in this run."""
    return f"{_prefix}-{next(_keys)}"


def args_json(name: str, args: dict[str, Any], _cache: dict[str, bytes] = {}) -> bytes:  # noqa: B006
    if name not in _cache:
        _cache[name] = json.dumps(args).encode()
    return _cache[name]


@functools.cache
def approver_key() -> Any:
    """This run's approver signing key (``SigningKey``); the gateway config lists its public half."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from gateway.approvals.keyring import SigningKey

    return SigningKey(APPROVER_KID, Ed25519PrivateKey.generate())


def _approvals() -> dict[str, Any]:
    from gateway.approvals.keyring import raw_public_b64

    public = raw_public_b64(approver_key().key.public_key())
    return {
        "grant_keys": ["grant-signing.pem"],  # generated in the data dir on start
        "grant_ttl_seconds": 900,  # grants are made before a run and used within it
        "approvers": [{"id": APPROVER, "groups": ["ops"], "keys": [{"kid": APPROVER_KID, "public_key": public}]}],
    }


def gateway_config(data_dir: Path, *, engine: str = "embedded", opa_url: str = "") -> dict[str, Any]:
    """The config dict the gateway child validates with ``Config.model_validate``."""
    from gateway.config import hash_api_key

    def tool(name: str, side_effect: str, callable_: str, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "input_schema": schema,
            "risk": {"side_effect": side_effect, "reversibility": "reversible", "data_sensitivity": "internal"},
            "executor": {"kind": "python", "callable": callable_},
            **extra,
        }

    policy: dict[str, Any] = {"engine": engine, "bundle": str(REPO / "rego")}
    if opa_url:
        policy["opa_url"] = opa_url
    return {
        "gateway_id": GATEWAY_ID,
        "data_dir": str(data_dir),
        "listen": "127.0.0.1:0",
        "policy": policy,
        "identities": [
            {"name": "bench-agent", "api_key_sha256": hash_api_key(API_KEY), "tenant": TENANT,
             "agent": AGENT, "user": "bench-user", "roles": ["agent"]},
            {"name": APPROVER, "api_key_sha256": hash_api_key(APPROVER_METADATA[0][1]), "tenant": TENANT,
             "approver": APPROVER, "roles": ["approver"]},
        ],
        "tools": [
            tool("noop", "read", "bench.tools:noop", SCHEMA),
            tool("wipe", "destructive", "bench.tools:noop", SCHEMA),
            tool("noop_write", "write", "bench.tools:noop", SCHEMA),
            tool("slow", "read", "bench.tools:slow",
                 {"type": "object", "properties": {"seconds": {"type": "number", "maximum": 10}}}, timeout_seconds=30),
        ],
        "approvals": _approvals(),
    }
