"""Test doubles and harnesses shipped with toolgate (used by its own tests).

- ``start_gateway(config)``: an in-process gateway on 127.0.0.1, port 0.
- ``GatewayProcess``: the real ``toolgate serve`` in a subprocess (for CLI and restart tests).
- ``next_event_about(stream, approval_id)``: the next event of an ``Approvals.Watch`` stream
  about one request, within a time limit.
- A few python tools with observable side effects: ``count_call`` appends a line per execution
  to ``<sandbox>/calls.log``; ``sleep`` waits ``seconds``; ``echo`` returns its args.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config import Config, load_config
from gateway.executors.base import ExecRequest


async def next_event_about(stream: Any, approval_id: str, within: float = 10.0) -> Any:
    """The next ``ApprovalEvent`` on a grpc.aio ``Watch`` stream about ``approval_id`` (events
    about other requests are skipped); ``asyncio.TimeoutError`` if none comes ``within`` s."""
    import grpc

    async def read() -> Any:
        while True:
            event = await stream.read()
            if event is grpc.aio.EOF:
                raise AssertionError("the watch stream ended")
            if event.approval.approval_id == approval_id:
                return event

    return await asyncio.wait_for(read(), within)


@dataclass
class RunningGateway:
    address: str
    port: int
    server: Any
    app: Any

    async def stop(self) -> None:
        from gateway.server import shutdown

        await shutdown(self.server, self.app, grace=1)


async def start_gateway(config: Config | str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None) -> RunningGateway:
    from gateway.server import create_server

    if not isinstance(config, Config):
        config = load_config(config)
    if data_dir is not None:
        config = config.model_copy(update={"data_dir": str(Path(data_dir).resolve())})
    server, port, app = await create_server(config, "127.0.0.1:0")
    return RunningGateway(f"127.0.0.1:{port}", port, server, app)


class GatewayProcess:
    """``toolgate serve --config FILE --port 0`` as a child process; reads the address it prints."""

    def __init__(self, config_path: str | os.PathLike[str], *, data_dir: str | os.PathLike[str], env: dict[str, str] | None = None) -> None:
        self.config_path = str(config_path)
        self.env = {**os.environ, "TOOLGATE_DATA_DIR": str(data_dir), **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""

    def start(self, timeout: float = 30.0) -> "GatewayProcess":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", self.config_path, "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"gateway exited with {self.proc.wait()}")
            if line.startswith("toolgate listening on "):
                self.address = line.split()[-1]
                self.output: list[str] = []
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        raise TimeoutError("gateway did not report its address")

    def _drain(self) -> None:
        """Keep reading the child's output so a chatty gateway never blocks on a full pipe."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def count_call(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    ctx.sandbox.mkdir(parents=True, exist_ok=True)
    with open(ctx.sandbox / "calls.log", "a") as f:
        f.write(json.dumps(args, sort_keys=True) + "\n")
    return {"recorded": True, "args": args}


def calls_recorded(sandbox_root: Path, tool: str) -> int:
    log = Path(sandbox_root) / tool / "calls.log"
    if not log.exists():
        return 0
    with open(log) as f:
        return sum(1 for _ in f)


async def sleep(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    await asyncio.sleep(float(args.get("seconds", 1)))
    return {"slept": args.get("seconds", 1)}


def echo(args: dict[str, Any], ctx: ExecRequest) -> Any:
    return args


def fail(args: dict[str, Any], ctx: ExecRequest) -> Any:
    raise RuntimeError(args.get("message", "failed on purpose"))
