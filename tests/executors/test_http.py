import base64
import json
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway.credentials import ResolvedCredentials
from gateway.executors.http import HttpExecutor, effective_hosts, refused_encoding
from gateway.normalize import normalize
from tests.executors._helpers import SECRET, call_context


def _tool(make_tool, url, hosts, **opts):
    options = {"allow_plain_http": True, **opts.pop("options", {})}
    executor = {"kind": "http", "url": url, "allowed_hosts": hosts, "options": options, **opts}
    return make_tool("fetch", executor=executor)


@pytest.fixture
async def executor():
    ex = HttpExecutor()
    yield ex
    await ex.close()


async def test_allowed_host_is_called_with_the_injected_header(executor, http_server, make_tool, make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/items/{id}", [f"127.0.0.1:{server.port}"])
    creds = ResolvedCredentials(headers={"Authorization": "Bearer tok-1"}, secret_values=frozenset({"tok-1"}))
    result = await executor.execute(make_request(tool, {"id": "../admin?x=1#f"}, credentials=creds))
    assert result.ok, result
    assert server.seen[0].path == "/items/..%2Fadmin%3Fx%3D1%23f"
    assert server.seen[0].headers["authorization"] == "Bearer tok-1"


async def test_egress_to_a_host_not_on_the_list_is_refused_before_connecting(executor, http_server, make_tool,
                                                                             make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/", ["api.example.com"])
    result = await executor.execute(make_request(tool))
    assert not result.ok and result.error.type == "egress_denied"
    assert server.connections == 0 and server.seen == []


async def test_proxies_from_the_environment_are_not_used(http_server, proxy_env, make_tool, make_request):
    """The allow-list and the address check judge the host really dialled, and the injected
    header goes only there: no proxy from the environment (read when the client is made)."""
    server, executor = http_server(), HttpExecutor()
    tool = _tool(make_tool, server.base + "/items", [f"127.0.0.1:{server.port}"])
    creds = ResolvedCredentials(headers={"Authorization": "Bearer tok-1"}, secret_values=frozenset({"tok-1"}))
    try:
        result = await executor.execute(make_request(tool, credentials=creds))
    finally:
        await executor.close()
    assert result.ok, result
    assert server.seen[0].path == "/items" and server.seen[0].headers["authorization"] == "Bearer tok-1"
    assert proxy_env.connections == 0 and proxy_env.seen == []


async def test_policy_hosts_narrow_the_descriptor_list(executor, http_server, make_tool, make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/", [f"127.0.0.1:{server.port}", "api.example.com"])
    result = await executor.execute(make_request(tool, constraints={"hosts": ["api.example.com"]}))
    assert result.error.type == "egress_denied" and server.connections == 0
    result = await executor.execute(make_request(tool, constraints={"hosts": []}))
    assert result.error.type == "egress_denied" and server.connections == 0
    result = await executor.execute(make_request(tool, constraints={"hosts": ["127.0.0.1"]}))
    assert result.ok and server.connections == 1


async def test_policy_cannot_widen_the_descriptor_list(executor, http_server, make_tool, make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/", ["api.example.com"])
    result = await executor.execute(make_request(tool, constraints={"hosts": ["127.0.0.1"]}))
    assert result.error.type == "egress_denied" and server.connections == 0


async def test_redirect_to_another_host_is_refused_and_never_followed(executor, http_server, make_tool,
                                                                      make_request):
    other = http_server()
    target = f"http://localhost:{other.port}/steal"
    origin = http_server({"/start": lambda seen: (302, {"location": target}, b"")})
    hosts = [f"127.0.0.1:{origin.port}", f"localhost:{other.port}"]  # even an allowed other host
    tool = _tool(make_tool, origin.base + "/start", hosts)
    creds = ResolvedCredentials(headers={"Authorization": "Bearer tok-2"}, secret_values=frozenset({"tok-2"}))
    result = await executor.execute(make_request(tool, credentials=creds))
    assert not result.ok and result.error.type == "egress_denied"
    assert other.connections == 0 and other.seen == []


async def test_same_origin_redirect_is_followed(executor, http_server, make_tool, make_request):
    server = http_server()
    server.routes["/old"] = lambda seen: (301, {"location": "/new"}, b"")
    tool = _tool(make_tool, server.base + "/old", [f"127.0.0.1:{server.port}"])
    result = await executor.execute(make_request(tool))
    assert result.ok and result.data["body"]["path"] == "/new"


async def test_plain_http_needs_an_explicit_opt_in(executor, http_server, make_tool, make_request):
    server = http_server()
    tool = make_tool("fetch", executor={"kind": "http", "url": server.base + "/", "allowed_hosts": ["127.0.0.1"]})
    result = await executor.execute(make_request(tool))
    assert result.error.type == "egress_denied" and server.connections == 0


async def test_tls_verification_is_on(executor, make_tool, make_request):
    # a TLS handshake against a plain-HTTP port fails instead of being skipped
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    try:
        tool = make_tool("fetch", executor={"kind": "http", "url": f"https://127.0.0.1:{port}/",
                                             "allowed_hosts": ["127.0.0.1"]}, timeout_seconds=1)
        result = await executor.execute(make_request(tool))
        assert not result.ok and result.error.type in ("tool_error", "timeout")
    finally:
        sock.close()
    for client in (executor._public, executor._private):  # both pools: public-only and private-network
        assert client._transport._pool._ssl_context.verify_mode.name == "CERT_REQUIRED"


async def test_response_body_is_capped(executor, http_server, make_tool, make_request):
    server = http_server({"/big": lambda seen: (200, {"content-type": "text/plain"}, b"y" * 500_000)})
    tool = _tool(make_tool, server.base + "/big", ["127.0.0.1"], options={"max_response_bytes": 1024})
    result = await executor.execute(make_request(tool))
    assert result.ok and len(result.data["body"]) == 1024 and result.meta["truncated"] is True


async def test_server_errors_are_retryable_client_errors_are_not(executor, http_server, make_tool, make_request):
    server = http_server({"/503": lambda s: (503, {}, b"busy"), "/404": lambda s: (404, {}, b"no")})
    r503 = await executor.execute(make_request(_tool(make_tool, server.base + "/503", ["127.0.0.1"])))
    r404 = await executor.execute(make_request(_tool(make_tool, server.base + "/404", ["127.0.0.1"])))
    assert r503.error.retryable and not r404.error.retryable
    assert r503.data["status"] == 503


async def test_json_body_comes_from_the_body_argument(executor, http_server, make_tool, make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/post", ["127.0.0.1"], method="POST", body_arg="payload")
    result = await executor.execute(make_request(tool, {"payload": {"a": 1}}))
    assert result.ok and json.loads(server.seen[0].body) == {"a": 1}


def test_effective_hosts_is_an_intersection():
    assert effective_hosts(["a.com", "b.com:8443"], None) == ["a.com", "b.com:8443"]
    assert effective_hosts(["a.com", "b.com:8443"], ["b.com"]) == ["b.com:8443"]
    assert effective_hosts(["a.com"], "a.com") == ["a.com"]
    assert effective_hosts(["a.com"], ["evil.com"]) == []


# -- the body cap never cuts a secret in half; dot segments; deep JSON ------------------------

def _pad_then_key(seen):
    """Echoes ``pad`` x's, then the X-Api-Key header (raw or base64), like a debug endpoint."""
    query = parse_qs(urlsplit(seen.path).query)
    key = seen.headers.get("x-api-key", "")
    key = base64.b64encode(key.encode()).decode() if query["form"][0] == "b64" else key
    return 200, {"content-type": "text/plain"}, ("x" * int(query["pad"][0]) + key + " and more").encode()


@pytest.mark.parametrize("form, secret_form", [("raw", SECRET), ("b64", base64.b64encode(SECRET.encode()).decode())])
@pytest.mark.parametrize("inside", [4, 20, -3, -1])
async def test_a_secret_crossing_the_body_cap_is_never_cut_in_half(executor, http_server, make_tool, make_request,
                                                                  form, secret_form, inside):
    """The agent picks the padding, so it picks where the cap lands inside the echoed key."""
    cap = 200
    server = http_server({"/echo": _pad_then_key})
    tool = _tool(make_tool, server.base + "/echo?pad={pad}&form={form}", ["127.0.0.1"],
                 options={"max_response_bytes": cap})
    creds = ResolvedCredentials(headers={"X-Api-Key": SECRET}, secret_values=frozenset({SECRET}))
    pad = cap - (inside % len(secret_form))
    result = await executor.execute(make_request(tool, {"pad": pad, "form": form}, credentials=creds))
    assert result.ok and result.meta["truncated"] is True and len(result.data["body"].encode()) <= cap
    obs = normalize(call_context(tool, credentials=creds, decision_id="d-1"), result, 1, 64 * 1024)
    shown = json.dumps([obs.data, obs.summary], ensure_ascii=False)
    assert "x" * 100 in shown
    assert [secret_form[:k] for k in range(4, len(secret_form) + 1) if secret_form[:k] in shown] == []


@pytest.mark.parametrize("template, args", [
    ("/v1/users/{user}/profile", {"user": ".."}),
    ("/v1/users/{user}/profile", {"user": "."}),
    ("/v1/users/{a}{b}/profile", {"a": ".", "b": "."}),
    ("/v1/users/.{a}/profile", {"a": "."}),
    ("/v1/users/{user}", {"user": ".."}),
])
async def test_a_value_making_a_dot_segment_is_refused_and_nothing_is_sent(executor, http_server, make_tool,
                                                                          make_request, template, args):
    server = http_server()
    tool = _tool(make_tool, server.base + template, ["127.0.0.1"])
    creds = ResolvedCredentials(headers={"X-Api-Key": "key-1"}, secret_values=frozenset({"key-1"}))
    result = await executor.execute(make_request(tool, args, credentials=creds))
    assert not result.ok and result.error.type == "tool_error" and "path segment" in result.error.message
    assert server.connections == 0 and server.seen == []


async def test_dots_that_make_no_dot_segment_go_to_the_templates_route(executor, http_server, make_tool,
                                                                      make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/v1/users/{user}/profile?q={q}", ["127.0.0.1"])
    result = await executor.execute(make_request(tool, {"user": "...", "q": ".."}))
    assert result.ok and server.seen[0].path == "/v1/users/.../profile?q=.."


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 700 + b"1" + b"}" * 700])
async def test_json_nested_too_deeply_is_observed_as_text(executor, http_server, make_tool, make_request, body):
    server = http_server({"/deep": lambda seen: (200, {"content-type": "application/json"}, body)})
    tool = _tool(make_tool, server.base + "/deep", ["127.0.0.1"])
    result = await executor.execute(make_request(tool))
    assert result.ok
    obs = normalize(call_context(tool, decision_id="d-1"), result, 1, 64 * 1024)  # never a RecursionError
    assert obs.status == "ok"
    assert isinstance(obs.data, str) or isinstance(obs.data["body"], str)  # the JSON as text


def test_numbers_in_a_url_are_written_as_they_were_hashed():
    from gateway.executors.http import render_url

    assert render_url("https://api.example.com/items/{n}", {"n": 1e20}) == "https://api.example.com/items/100000000000000000000"
    assert render_url("https://api.example.com/items/{n}", {"n": 2.5e-7}) == "https://api.example.com/items/2.5e-7"
    assert render_url("https://api.example.com/items/{n}", {"n": 42}) == "https://api.example.com/items/42"


def _gzip_bomb() -> bytes:
    """~200 KB of gzip that inflates to 200 MB of zeros."""
    import gzip
    import io

    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as z:
        block = b"\0" * (1 << 20)
        for _ in range(200):
            z.write(block)
    return out.getvalue()


@pytest.mark.parametrize("encoding", ["gzip", "GZIP", "gzip, gzip", "zstd", "br", "deflate"])
async def test_a_compressed_body_is_refused_never_inflated(executor, http_server, make_tool, make_request, encoding):
    """The executor asks for ``identity``; an upstream that compresses anyway (a hostile one: a
    small body that inflates to gigabytes) is a tool error, its body never decoded."""
    bomb = _gzip_bomb()
    server = http_server({"/bomb": lambda seen: (200, {"content-type": "text/plain", "content-encoding": encoding}, bomb)})
    tool = _tool(make_tool, server.base + "/bomb", ["127.0.0.1"], options={"max_response_bytes": 1 << 20})
    result = await executor.execute(make_request(tool))
    assert not result.ok and result.error.type == "tool_error" and not result.error.retryable
    assert "content-encoding" in result.error.message and "identity" in result.error.message
    assert result.data is None or "body" not in (result.data or {})
    assert server.seen[0].headers.get("accept-encoding") == "identity"


@pytest.mark.parametrize(("headers", "named"), [
    ({}, None), ({"content-encoding": ""}, None), ({"content-encoding": "identity"}, None),
    ({"content-encoding": " Identity "}, None),
    ({"content-encoding": "gzip"}, "'gzip'"), ({"content-encoding": "GZIP"}, "'gzip'"),
    ({"content-encoding": "identity, gzip"}, "'identity, gzip'"),  # anything but identity alone
    ({"content-encoding": "x" * 100}, repr("x" * 40)),  # named, cut to 40 characters
])
def test_the_one_refusal_of_a_content_encoding(headers, named):
    """Shared by the HTTP executor and the MCP executor's HTTP transport: one check, one wording."""
    refusal = refused_encoding(headers, "the upstream")
    if named is None:
        assert refusal is None
    else:
        assert refusal == (f"the upstream answered with content-encoding {named}; the gateway asks for identity "
                           "and does not decode compressed bodies")


@pytest.mark.parametrize("encoding", ["identity", "", "Identity"])
async def test_an_identity_body_is_read_as_it_is(executor, http_server, make_tool, make_request, encoding):
    headers = {"content-type": "text/plain"} | ({"content-encoding": encoding} if encoding else {})
    server = http_server({"/plain": lambda seen: (200, headers, b"hello")})
    result = await executor.execute(make_request(_tool(make_tool, server.base + "/plain", ["127.0.0.1"])))
    assert result.ok and result.data["body"] == "hello"


async def test_the_body_carries_numbers_as_hashed_and_approved(executor, http_server, make_tool, make_request):
    """An integer literal past 2^53 that is the RFC 8785 text of a double is accepted as that double
    (gateway.arguments); the upstream gets the same text, not Python's float form (1e+20)."""
    from gateway.arguments import parse_strict

    server = http_server()
    tool = _tool(make_tool, server.base + "/post", ["127.0.0.1"], method="POST", body_arg="payload")
    args = parse_strict(b'{"payload": {"big": 100000000000000000000, "edge": 9007199254740992, "x": 0.5}}', max_bytes=1024)
    assert (await executor.execute(make_request(tool, args))).ok
    assert server.seen[0].body == b'{"big":100000000000000000000,"edge":9007199254740992,"x":0.5}'


@pytest.mark.parametrize("name", ["Accept-Encoding", "accept-encoding"])
async def test_a_descriptor_header_cannot_ask_for_a_compressed_body(executor, http_server, make_tool, make_request, name):
    server = http_server()
    tool = _tool(make_tool, server.base + "/x", ["127.0.0.1"], options={"headers": {name: "gzip", "X-A": "1"}})
    assert (await executor.execute(make_request(tool))).ok
    assert server.seen[0].headers.get("accept-encoding") == "identity"
    assert server.seen[0].headers.get("x-a") == "1"


async def test_a_credential_header_that_is_not_ascii_is_named_not_sent(executor, http_server, make_tool, make_request):
    """A header value HTTP cannot carry (not ASCII) fails the call as a tool_error naming the
    header, never the value, and nothing is sent; httpx raised UnicodeEncodeError (internal_error)."""
    server = http_server()
    tool = _tool(make_tool, server.base + "/", [f"127.0.0.1:{server.port}"])
    secret = "tökén-1234567890"
    creds = ResolvedCredentials(headers={"X-Api-Key": secret}, secret_values=frozenset({secret}))
    result = await executor.execute(make_request(tool, credentials=creds))
    assert not result.ok and result.error.type == "tool_error" and not result.error.retryable, result
    assert "header 'X-Api-Key' holds characters an HTTP header cannot carry" in result.error.message
    assert secret not in result.error.message and server.connections == 0


async def test_a_cookie_one_call_was_set_is_never_sent_on_another(executor, http_server, make_tool, make_request):
    """The client is shared by every call, tool and tenant: a session cookie tenant A's key earned
    must not go out with tenant B's call, nor with a call that has no credentials."""
    def login(seen):
        cookie = {"set-cookie": "session=A-SESSION; Path=/"} if seen.headers.get("authorization") == "Bearer a-key" else {}
        return 200, {"content-type": "application/json", **cookie}, b"{}"

    server = http_server({"/me": login})
    tool = _tool(make_tool, server.base + "/me", [f"127.0.0.1:{server.port}"])
    for tenant, key in (("tenant-a", "a-key"), ("tenant-b", "b-key"), ("tenant-c", None)):
        creds = ResolvedCredentials(headers={"Authorization": f"Bearer {key}"}, secret_values=frozenset({key})) if key else None
        assert (await executor.execute(make_request(tool, credentials=creds, tenant=tenant))).ok
    assert [s.headers.get("cookie") for s in server.seen] == [None, None, None]


@pytest.fixture
def dripping_server():
    """An HTTP server on 127.0.0.1 (port 0) that answers with its headers at once, then one byte of
    body every 0.2 s for 10 s: each read is quick, the whole response is not."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 50\r\n\r\n")
            for _ in range(50):
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    thread.join(5)


async def test_the_tool_timeout_bounds_the_whole_response_not_each_read(executor, dripping_server, make_tool,
                                                                        make_request):
    import time

    port = dripping_server
    tool = _tool(make_tool, f"http://127.0.0.1:{port}/slow", [f"127.0.0.1:{port}"])
    started = time.monotonic()
    result = await executor.execute(make_request(tool, timeout=1))
    took = time.monotonic() - started
    assert not result.ok and result.error.type == "timeout", result
    assert took < 3, f"the executor ran {took:.1f}s on a 1 s timeout"
