"""The fake gateway refuses a schema whose references do not resolve inside it, as the real one does."""

from __future__ import annotations

import http.server
import threading

import pytest

from runtime_client.testing import FakeGateway


@pytest.fixture
def hits():
    """A real HTTP server on 127.0.0.1 serving a schema; yields (its base URL, the paths asked for)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_reference_is_never_fetched(hits):
    base, seen = hits
    fake = FakeGateway()
    with pytest.raises(ValueError, match="does not resolve within the schema"):
        fake.add_tool("t", schema={"type": "object", "properties": {"a": {"$ref": f"{base}/a.json"}}})
    assert seen == []


def test_a_local_reference_still_validates():
    fake = FakeGateway()
    fake.add_tool("t", schema={"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}},
                               "$defs": {"s": {"type": "string"}}})
    with fake.client() as client:
        assert client.execute("t", {"a": "x"}).code == "ok"
        assert client.execute("t", {"a": 1}).code == "invalid_arguments"
