"""Policy traffic goes straight to the configured OPA: ``HTTP_PROXY``, ``HTTPS_PROXY`` and
``ALL_PROXY`` in the gateway's environment are not used, over ``http://``, ``https://`` and
``unix://``, for decisions and for ``reload``. A proxy there would see every policy input and
could answer ``allow`` itself.

The proxy here is a real listener on 127.0.0.1 that records every connection and answers each
one with a forged ``allow``; the OPA servers are real.
"""

from __future__ import annotations

import asyncio

import socketserver
import threading
from collections.abc import Iterator

import httpx
import pytest

from policies import OPAEngine
from policy_opa_server import WRITE, certificate_refused
from tests.conftest import route_every_proxy_to

pytestmark = pytest.mark.opa


FORGED = b'{"result":{"decision":"allow","reasons":["forged by the proxy"]},"decision_id":"forged"}'


class RecordingProxy:
    """Records the first bytes of every connection, then answers it with a forged ``allow``."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(2)
                try:
                    data = self.request.recv(65536)
                except OSError:
                    data = b""
                owner.seen.append(data)  # before answering: a client that got an answer was counted
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                self.request.sendall(head + b"Content-Length: %d\r\n\r\n" % len(FORGED) + FORGED)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingProxy]:
    """The recording proxy, set as every proxy variable httpx reads, with no exceptions."""
    proxy = RecordingProxy()
    route_every_proxy_to(monkeypatch, proxy.url)
    yield proxy
    proxy.stop()


@pytest.fixture(params=["http", "https", "unix"])
def opa_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real OPA's URL over each transport; for https, its CA is trusted through ``SSL_CERT_FILE``."""
    if request.param == "http":
        return request.getfixturevalue("opa_server").url
    if request.param == "unix":
        return request.getfixturevalue("unix_opa").url
    server, ca = request.getfixturevalue("tls_opa")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return server.url


def test_the_stand_in_proxy_answers_a_client_that_trusts_the_environment(proxy):
    """Without this the other tests would prove nothing: the variables reach httpx's defaults."""
    response = httpx.post("http://127.0.0.1:1/v1/data/toolgate/decision", json={"input": {}}, timeout=2)
    assert response.content == FORGED
    assert len(proxy.seen) == 1 and proxy.seen[0].startswith(b"POST http://127.0.0.1:1/v1/data/toolgate/decision ")


async def test_a_decision_goes_to_opa_not_to_the_proxy(opa_url, proxy):
    engine = OPAEngine(opa_url, timeout_ms=2000)
    try:
        decision = await engine.evaluate(WRITE)
    finally:
        await engine.close()
    assert decision.decision == "require_approval" and decision.engine_decision_id != "forged"
    assert proxy.seen == []


def test_reload_asks_opa_not_the_proxy(opa_url, proxy):
    engine = OPAEngine(opa_url)
    asyncio.run(engine.reload())
    assert engine.version.startswith("opa:sha256:")
    assert proxy.seen == []


async def test_an_https_opa_whose_ca_is_not_trusted_is_unavailable(tls_opa, monkeypatch):
    """Verification stays on: without ``SSL_CERT_FILE`` naming the CA, OPA's certificate is refused."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    engine = OPAEngine(tls_opa[0].url, timeout_ms=2000)
    await certificate_refused(engine)
