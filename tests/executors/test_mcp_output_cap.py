"""What one MCP call may receive from its upstream is bounded (``max_output_bytes``), and what
the gateway holds while it refuses stays near that bound. Real upstreams: a stdio process and
streamable-HTTP servers (``data/mcp_flood.py``), a raw HTTP server for a compressed body.

Memory is the gateway process's own peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``)
over the call, after a first call has loaded the SDK."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.executors import mcp_transport
from gateway.executors.mcp import DEFAULT_MAX_OUTPUT_BYTES, McpConfigError, McpExecutor, parse_upstreams

FLOOD = str(Path(__file__).parent / "data" / "mcp_flood.py")
HUGE = 30 * 1024 * 1024
GROWTH_MIB = 24
"""What a refused HUGE reply may grow the gateway by: less than the reply, so holding it once fails."""
MIB = 1024 * 1024


def _stdio(**extra) -> McpExecutor:
    return McpExecutor(parse_upstreams({"flood": {"transport": "stdio", "command": sys.executable,
                                                  "args": [FLOOD], **extra}}))


def _http(url: str, **extra) -> McpExecutor:
    return McpExecutor(parse_upstreams({"flood": {"transport": "http", "url": url, **extra}}))


def _tool(make_tool, remote: str):
    return make_tool(f"flood_{remote}", executor={"kind": "mcp", "server": "flood", "remote_tool": remote})


def _refused(result, cap: int = DEFAULT_MAX_OUTPUT_BYTES) -> bool:
    message = result.error.message if result.error else ""
    return (not result.ok and result.error.type == "tool_error" and not result.error.retryable
            and f"more than {cap} bytes" in message and "mcp_upstreams.flood.max_output_bytes" in message)


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _reset_peak_rss() -> int:
    """Reset this process's peak RSS to its current RSS (KiB), which is returned."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("the peak RSS cannot be reset on this system")
    return _kib("VmRSS")


def _peak_growth_mib(baseline_kib: int) -> float:
    return (_kib("VmHWM") - baseline_kib) / 1024


async def _warm_up(executor: McpExecutor, make_tool, make_request) -> None:
    """A first, small call: the SDK and its models are loaded before memory is measured."""
    result = await executor.execute(make_request(_tool(make_tool, "big"), {"size": 10}))
    assert result.ok, result


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- stdio ---------------------------------------------------------------------------------


async def test_a_stdio_reply_of_one_huge_line_is_refused_without_holding_it(make_tool, make_request):
    executor = _stdio()
    await _warm_up(executor, make_tool, make_request)
    baseline = _reset_peak_rss()
    result = await executor.execute(make_request(_tool(make_tool, "big"), {"size": HUGE}))
    growth = _peak_growth_mib(baseline)
    assert _refused(result), result.error
    assert f"big {HUGE}" in result.stderr  # the upstream's stderr still comes back with the failure
    assert growth < GROWTH_MIB, f"the gateway grew by {growth:.0f} MiB for a {HUGE // MIB} MiB reply"


async def test_a_stdio_upstream_writing_without_end_is_stopped_with_its_process_group(
        tmp_path, make_tool, make_request):
    """No newline ever (not even an answer to ``initialize``): the line is never held past the
    cap, the call ends long before its timeout, and the process and the child it started are
    both gone afterwards."""
    await _warm_up(_stdio(), make_tool, make_request)
    pid_file = tmp_path / "pids"
    baseline = _reset_peak_rss()
    started = time.monotonic()
    result = await _stdio(args=[FLOOD, "--endless", str(pid_file)]).execute(
        make_request(_tool(make_tool, "big"), {"size": 1}, timeout=20))
    elapsed, growth = time.monotonic() - started, _peak_growth_mib(baseline)
    assert _refused(result), result.error
    assert elapsed < 15 and growth < GROWTH_MIB, (elapsed, growth)
    pids = [int(p) for p in pid_file.read_text().split()]
    deadline = time.monotonic() + 5  # the child is reaped by whoever inherited it
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, pids)), pids


async def test_many_small_stdio_messages_count_against_one_calls_cap(make_tool, make_request):
    """Twelve log notifications of 512 KiB each: none is large, together they are past 4 MiB."""
    result = await _stdio().execute(make_request(_tool(make_tool, "chatty"), {"count": 12, "size": 512 * 1024}))
    assert _refused(result), result.error


@pytest.fixture
def budgets(monkeypatch):
    """The budgets calls are given, recorded as they are made (a spy: they work unchanged)."""
    made: list[mcp_transport.OutputBudget] = []

    class Recorded(mcp_transport.OutputBudget):
        def __init__(self, upstream: str, cap: int) -> None:
            super().__init__(upstream, cap)
            made.append(self)

    monkeypatch.setattr(mcp_transport, "OutputBudget", Recorded)
    return made


async def test_a_stdio_call_receiving_exactly_its_cap_works_and_one_byte_less_is_refused(
        make_tool, make_request, budgets):
    request = make_request(_tool(make_tool, "big"), {"size": 200_000})
    first = await _stdio().execute(request)
    assert first.ok, first
    whole = budgets[-1].received  # what this call receives: handshake, listing, a 200 kB reply
    assert 200_000 < whole < 256 * 1024
    at_cap = await _stdio(max_output_bytes=whole).execute(request)
    assert at_cap.ok and at_cap.data == "x" * 200_000, at_cap.error
    below = await _stdio(max_output_bytes=whole - 1).execute(request)
    assert _refused(below, whole - 1), below.error


def test_max_output_bytes_is_configurable_and_positive():
    spec = {"transport": "stdio", "command": "x"}
    assert parse_upstreams({"u": spec})["u"].max_output_bytes == DEFAULT_MAX_OUTPUT_BYTES
    assert parse_upstreams({"u": {**spec, "max_output_bytes": 1024}})["u"].max_output_bytes == 1024
    for bad in (0, -1, "lots"):
        with pytest.raises(McpConfigError):
            parse_upstreams({"u": {**spec, "max_output_bytes": bad}})


# -- streamable HTTP -----------------------------------------------------------------------


@pytest.fixture
def flood_http(tmp_path):
    """Factory: the flood upstream over streamable HTTP (``json`` bodies or ``sse``); its /mcp URL."""
    procs: list[subprocess.Popen] = []

    def start(mode: str) -> str:
        port_file = tmp_path / f"flood-{mode}.port"
        proc = subprocess.Popen([sys.executable, FLOOD, "--http", str(port_file), mode],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the HTTP upstream did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{port_file.read_text()}/mcp"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


async def test_a_huge_http_reply_body_is_refused_without_holding_it(flood_http, make_tool, make_request):
    executor = _http(flood_http("json"))
    await _warm_up(executor, make_tool, make_request)
    baseline = _reset_peak_rss()
    result = await executor.execute(make_request(_tool(make_tool, "big"), {"size": HUGE}))
    growth = _peak_growth_mib(baseline)
    assert _refused(result), result.error
    assert growth < GROWTH_MIB, f"the gateway grew by {growth:.0f} MiB for a {HUGE // MIB} MiB reply"


async def test_many_sse_events_count_against_one_calls_cap(flood_http, make_tool, make_request):
    """Each event is under the SDK's own 1 MiB event limit; together they are past the cap."""
    executor = _http(flood_http("sse"))
    result = await executor.execute(make_request(_tool(make_tool, "chatty"), {"count": 12, "size": 512 * 1024}))
    assert _refused(result), result.error
    small = await executor.execute(make_request(_tool(make_tool, "chatty"), {"count": 2, "size": 1024}))
    assert small.ok and small.data == {"result": "done"}, small.error


async def test_a_compressed_http_body_is_refused_not_inflated(http_server, make_tool, make_request):
    """The gateway asks for identity; an upstream that sends gzip anyway (here 64 MiB of JSON in
    a few KiB) is refused before anything is inflated."""
    reply = b'{"jsonrpc": "2.0", "id": 0, "result": {"pad": "' + b"0" * (64 * MIB) + b'"}}'
    bomb = gzip.compress(reply, compresslevel=9)
    server = http_server({"/mcp": lambda seen: (200, {"content-type": "application/json",
                                                        "content-encoding": "gzip"}, bomb)})
    del reply
    baseline = _reset_peak_rss()
    result = await _http(f"{server.base}/mcp").execute(make_request(_tool(make_tool, "big"), {"size": 1}))
    growth = _peak_growth_mib(baseline)
    assert not result.ok and result.error.type == "tool_error" and not result.error.retryable, result.error
    assert "content-encoding 'gzip'" in result.error.message and "flood" in result.error.message
    assert growth < 32, growth
    assert server.seen and server.seen[0].headers.get("accept-encoding") == "identity"
    assert json.loads(server.seen[0].body)["method"] == "initialize"


async def test_an_mcp_upstream_and_an_http_tool_refuse_a_compressed_body_in_the_same_words(
        http_server, make_tool, make_request):
    """One refusal (``gateway.executors.http.refused_encoding``), each naming its sender."""
    from gateway.executors.http import HttpExecutor

    server = http_server({"/z": lambda seen: (200, {"content-type": "application/json", "content-encoding": "br"},
                                              b"compressed")})
    fetch = make_tool("fetch", executor={"kind": "http", "url": f"{server.base}/z", "allowed_hosts": ["127.0.0.1"],
                                         "options": {"allow_plain_http": True}})
    http = HttpExecutor()
    try:
        by_http = await http.execute(make_request(fetch))
    finally:
        await http.close()
    by_mcp = await _http(f"{server.base}/z").execute(make_request(_tool(make_tool, "big"), {"size": 1}))
    words = "answered with content-encoding 'br'; the gateway asks for identity and does not decode compressed bodies"
    assert (by_http.error.type, by_http.error.retryable, by_http.error.message) == (
        "tool_error", False, f"the upstream {words}")
    assert (by_mcp.error.type, by_mcp.error.retryable, by_mcp.error.message) == (
        "tool_error", False, f"MCP upstream flood {words}")


async def test_once_a_call_is_refused_its_transport_dials_the_upstream_no_more(http_server):
    """The SDK swallows an exception inside an SSE stream and may reconnect (with the upstream's
    credential headers): a budget that has refused stops every later request before it is sent."""
    import httpx2

    server = http_server({"/mcp": lambda seen: (200, {"content-type": "application/json"}, b"{}")})
    budget = mcp_transport.OutputBudget("flood", 10)
    transport = mcp_transport.CappedHTTPTransport(budget)
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.get(f"{server.base}/mcp")
        assert response.status_code == 200 and len(server.seen) == 1
        with pytest.raises(mcp_transport.OutputRefused):
            budget.take(11)
        with pytest.raises(mcp_transport.OutputRefused):
            await client.get(f"{server.base}/mcp")
    assert len(server.seen) == 1
