"""Shared fixtures: a demo-based config in a temp data dir and an in-process gateway on port 0."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import grpc
import pytest
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.config import Config, load_config
from gateway.testing import start_gateway

ROOT = Path(__file__).resolve().parent.parent
DEMO_CONFIG = ROOT / "examples" / "toolgate.yaml"
AGENT_KEY = "demo-agent-key"

TEST_TOOLS: list[dict[str, Any]] = [
    {
        "name": "count_call",
        "description": "records each execution (test side-effect counter)",
        "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": True},
        "risk": {"side_effect": "read"},
        "executor": {"kind": "python", "callable": "gateway.testing:count_call"},
    },
    {
        "name": "echo",
        "description": "returns its arguments",
        "input_schema": {"type": "object"},
        "risk": {"side_effect": "none"},
        "executor": {"kind": "python", "callable": "gateway.testing:echo"},
    },
    {
        "name": "sleep",
        "description": "sleeps",
        "input_schema": {"type": "object", "properties": {"seconds": {"type": "number", "maximum": 30}}},
        "risk": {"side_effect": "none"},
        "executor": {"kind": "python", "callable": "gateway.testing:sleep"},
        "timeout_seconds": 30,
    },
    {
        "name": "sleep_short",
        "description": "sleeps, with a 0.3 s timeout",
        "input_schema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
        "risk": {"side_effect": "write"},
        "executor": {"kind": "python", "callable": "gateway.testing:sleep"},
        "timeout_seconds": 0.3,
    },
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``first`` run before all others (their relative order kept): the WAL-bound
    tests failed only late in full runs, after ~900 other tests, never when run first or alone."""
    items.sort(key=lambda item: item.get_closest_marker("first") is None)


class NormalizeContext:
    """The parts of a CallContext ``gateway.normalize.normalize`` reads: tool ``t`` version 1, no
    approval, no credentials (for calling it outside a gateway)."""

    class tool:
        name = "t"

        class config:
            version = "1"

    decision_id, args_hash, approval, credentials = "d", "sha256:x", None, None


def demo_config(tmp_path: Path, **overrides: Any) -> Config:
    """The demo config, plus test tools, with its data dir in tmp_path."""
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["tools"] = raw["tools"] + TEST_TOOLS
    raw["data_dir"] = str(tmp_path / "data")
    raw.update(overrides)
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    # keep relative paths (the policy bundle) pointing into the repository
    cfg = load_config(path)
    return cfg.model_copy(update={"base_dir": str(DEMO_CONFIG.parent)}) if "policy" not in overrides else cfg


def config_file_with_tool(tmp_path: Path, schema: dict[str, Any]) -> Path:
    """The demo config with one read tool, ``lookup_order``, taking ``schema``, written to
    tmp_path (to load with ``load_config``)."""
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["tools"] = [{"name": "lookup_order", "input_schema": schema, "risk": {"side_effect": "read"},
                     "executor": {"kind": "python", "callable": "gateway.testing:echo"}}]
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return demo_config(tmp_path)


@pytest.fixture
async def gateway(config: Config):
    running = await start_gateway(config)
    try:
        yield running
    finally:
        await running.stop()


def policy_bundle(folder: Path, rego: str) -> Path:
    """A policy bundle of one file, ``rego``, made in ``folder`` (for ``policy.bundle``)."""
    folder.mkdir()
    (folder / "policy.rego").write_text(rego)
    return folder


async def call_once(config: Config, tool: str, args: bytes | str = b"{}", **fields: Any) -> pb.ToolCallResponse:
    """Start a gateway on ``config``, make one call as the demo agent, stop it; the response."""
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        return await client.call(tool, args, **fields)
    finally:
        await client.close()
        await running.stop()


async def call_each(config: Config, calls: list[tuple[str, Any]]) -> list[pb.ToolCallResponse]:
    """Start a gateway on ``config``, make each (tool, arguments as a JSON value) call in turn as
    the demo agent, stop it; the responses."""
    import json

    running = await start_gateway(config)
    client = Client(running.address)
    try:
        return [await client.call(tool, json.dumps(args)) for tool, args in calls]
    finally:
        await client.close()
        await running.stop()


class Client:
    """A thin async test client: raw gRPC stubs with the API key in metadata."""

    def __init__(self, address: str, api_key: str = AGENT_KEY) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = pb_grpc.ToolGatewayStub(self.channel)
        self.metadata = (("x-api-key", api_key),) if api_key else ()

    async def call(self, tool: str, args: bytes | str = b"{}", **fields: Any) -> pb.ToolCallResponse:
        raw = args.encode() if isinstance(args, str) else args
        return await self.stub.ExecuteTool(
            pb.ToolCallRequest(tool=tool, args_json=raw, **fields), metadata=self.metadata, timeout=30
        )

    async def close(self) -> None:
        await self.channel.close()


@pytest.fixture
async def client(gateway):
    c = Client(gateway.address)
    try:
        yield c
    finally:
        await c.close()


@asynccontextmanager
async def real_gateway_client(config: Config, **start: Any) -> AsyncIterator[Any]:
    """A real gateway on 127.0.0.1 (port 0) and a runtime_client ``AsyncGatewayClient`` with
    the demo agent's key; both closed on exit. ``start``: ``start_gateway``'s keywords."""
    from runtime_client import AsyncGatewayClient

    running = await start_gateway(config, **start)
    client = AsyncGatewayClient(running.address, api_key=AGENT_KEY)
    try:
        yield client
    finally:
        await client.close()
        await running.stop()


def audit_records(path: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def write_audit_log(path: Path, n: int, rotate_bytes: int = 0, *, start: int = 0) -> None:
    """Open the log as a gateway start does (``rotate_bytes`` as ``audit.rotate_bytes``),
    write ``n`` flushed ``result`` records numbered from ``start``, close it."""
    from gateway.audit import AuditLog

    log = AuditLog(path, gateway_id="test", rotate_bytes=rotate_bytes)
    for i in range(start, start + n):
        log.record("result", decision_id=f"d{i}", code="ok", tool="echo", n=i)
        log.flush()
    log.close()


class StoppedClock:
    """A stand-in for the ``time`` module ``gateway.audit`` reads, stopped: every start in one
    tick, as on a coarse clock (monkeypatch ``gateway.audit.time`` with it)."""

    @staticmethod
    def time() -> float:
        return 1_800_000_000.0

    @staticmethod
    def time_ns() -> int:
        return 1_800_000_000_000_000_000


def audit_steps(path: Path) -> list[dict[str, Any]]:
    """Every call step in the log (each with its call's decision_id), and the other records."""
    from gateway.audit import iter_steps

    return list(iter_steps(audit_records(path)))


def route_every_proxy_to(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Set ``url`` as every proxy variable httpx reads (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``, either case) with no ``NO_PROXY`` exception: a client that honours the
    environment sends everything there."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, url)
        monkeypatch.setenv(name.lower(), url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


class JsonLineWorker:
    """A Python subprocess running ``code``, which answers each JSON line on its stdin with one
    JSON line; replaced by a fresh one when an answer does not come in time (it hung, or the
    code under test killed it), and ``ask`` then returns None. For tests whose subject may hang
    or crash the interpreter."""

    def __init__(self, code: str, cwd: str | Path | None = None) -> None:
        self._code, self._cwd = code, cwd
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", self._code], cwd=self._cwd, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def ask(self, job: dict, timeout: float) -> Any | None:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self.proc = self._start()
            return None
        return json.loads(line)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

