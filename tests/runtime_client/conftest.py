from __future__ import annotations

from typing import Any

import pytest

from runtime_client import MemoryCheckpoints, SQLiteCheckpoints
from runtime_client.testing import FakeGateway

POLICY_TEXT = {"refunds": "Refunds above 500 EUR need a manager."}


def lookup_policy(topic: str) -> dict[str, Any]:
    return {"topic": topic, "text": POLICY_TEXT.get(topic, "none")}


def refund_policy(args: dict[str, Any]) -> str:
    amount = args.get("amount", 0)
    return "allow" if amount <= 50 else "approval" if amount <= 500 else "deny"


def demo_fake() -> FakeGateway:
    """A fake shaped like examples/toolgate.yaml (reads allowed, write needs ops, delete denied)."""
    fake = FakeGateway()
    fake.add_tool("lookup_policy", lookup_policy, side_effect="read", schema={
        "type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"],
        "additionalProperties": False})
    fake.add_tool("read_file", lambda path: {"path": path, "content": "hello"}, side_effect="read")
    fake.add_tool("write_file", lambda path, content: {"written": len(content)},
                  side_effect="write", policy="approval")
    fake.add_tool("delete_file", lambda path: {"deleted": path}, side_effect="destructive",
                  policy="deny")
    fake.add_tool("refund", lambda order_id, amount: {"refunded": amount},
                  side_effect="external_write", policy=refund_policy)
    return fake


@pytest.fixture
def fake() -> FakeGateway:
    return demo_fake()


@pytest.fixture
def gateway(fake: FakeGateway):
    return fake.async_client()


@pytest.fixture
def checkpoints(tmp_path) -> SQLiteCheckpoints:
    return SQLiteCheckpoints(tmp_path / "checkpoints.sqlite3")


@pytest.fixture
def memory_checkpoints() -> MemoryCheckpoints:
    return MemoryCheckpoints()


@pytest.fixture
async def running(tmp_path):
    """A real gateway (demo config plus test tools) on 127.0.0.1 port 0."""
    from gateway.testing import start_gateway
    from tests.conftest import demo_config

    running = await start_gateway(demo_config(tmp_path))
    try:
        yield running
    finally:
        await running.stop()
