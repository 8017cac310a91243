"""A real HTTP server on 127.0.0.1 (port 0) that records what arrived, for executor tests."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Route = Callable[[Seen], tuple[int, dict[str, str], bytes]]


@dataclass
class RecordingServer:
    routes: dict[str, Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0

    def start(self) -> "RecordingServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                owner.connections += 1
                super().setup()

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length))
                owner.seen.append(seen)
                route = owner.routes.get(self.path.split("?")[0], _echo)
                status, headers, body = route(seen)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _echo(seen: Seen) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"path": seen.path, "headers": seen.headers}).encode()
    return 200, {"content-type": "application/json"}, body


import pytest  # noqa: E402
from tests.conftest import route_every_proxy_to  # noqa: E402


@pytest.fixture
def http_server():
    """Factory: start recording servers; all are stopped at the end of the test."""
    started: list[RecordingServer] = []

    def make(routes: dict[str, Route] | None = None) -> RecordingServer:
        server = RecordingServer(routes=dict(routes or {})).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def fake_resolver():
    """Factory: a resolver that answers from a table and records the names it was asked.

    DNS is outside the system; tests that need a name to resolve somewhere it does not on
    this machine (a rebinding answer) hand the executor one of these."""

    def make(answers: dict[str, list[str]]):
        asked: list[str] = []

        async def resolve(host: str, port: int) -> list[str]:
            asked.append(host)
            return answers[host]

        resolve.asked = asked  # type: ignore[attr-defined]
        return resolve

    return make


@pytest.fixture
def make_tool():
    from gateway.config import ToolConfig

    def make(name: str = "t", *, side_effect: str = "read", **kw: object) -> ToolConfig:
        executor = kw.pop("executor", {"kind": "python", "callable": "x:y"})
        return ToolConfig.model_validate(
            {"name": name, "risk": {"side_effect": side_effect}, "executor": executor, **kw}
        )

    return make


@pytest.fixture
def make_request(tmp_path):
    from gateway.executors.base import ExecRequest

    def make(tool, args=None, *, constraints=None, credentials=None, tenant="acme", timeout=None):
        return ExecRequest(
            tool=tool, args=dict(args or {}), constraints=dict(constraints or {}), tenant=tenant,
            decision_id="d-1", timeout=timeout or tool.timeout_seconds, sandbox=tmp_path / "sandbox" / tool.name,
            credentials=credentials,
        )

    return make


@pytest.fixture
def proxy_env(http_server, monkeypatch: pytest.MonkeyPatch) -> RecordingServer:
    """A recording server set as every proxy variable httpx reads (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``, either case; no ``NO_PROXY``): its ``connections`` count a client that used it."""
    proxy = http_server()
    route_every_proxy_to(monkeypatch, proxy.base)
    return proxy


@pytest.fixture
def gate(request):
    """A closed gate for ``tests.executors.data.python_tools:hang``, opened at the end of the test
    whatever happens."""
    from tests.executors.data import python_tools

    name = request.node.name
    event = python_tools.gate(name)
    yield name
    event.set()
    assert python_tools.ENDED[name].wait(10) or not python_tools.STARTED[name]
