import base64
import sys
from pathlib import Path

import pytest
import structlog

from gateway.credentials import ResolvedCredentials
from gateway.executors.mcp import McpConfigError, McpExecutor, parse_upstreams

SERVER = str(Path(__file__).parent / "data" / "mcp_upstream.py")


def _executor(tmp_path, **extra):
    env = {"MCP_EXTRA_TOOL_FILE": str(tmp_path / "rug"), "WIPE_MARKER": str(tmp_path / "wiped")}
    return McpExecutor(parse_upstreams({"notes": {"transport": "stdio", "command": sys.executable,
                                                  "args": [SERVER], "env": env, **extra}}))


def _tool(make_tool, remote, **kw):
    return make_tool(f"notes_{remote}", executor={"kind": "mcp", "server": "notes", "remote_tool": remote}, **kw)


async def test_calls_the_classified_remote_tool_over_stdio(tmp_path, make_tool, make_request):
    result = await _executor(tmp_path).execute(make_request(_tool(make_tool, "add"), {"a": 2, "b": 3}))
    assert result.ok, result
    assert result.data == {"sum": 5}


async def test_env_credentials_reach_only_this_calls_upstream_process(tmp_path, make_tool, make_request):
    ex = _executor(tmp_path)
    tool = _tool(make_tool, "whoami")
    a = ResolvedCredentials(env={"UPSTREAM_TOKEN": "tenant-a-token"}, secret_values=frozenset({"tenant-a-token"}))
    got_a = await ex.execute(make_request(tool, credentials=a, tenant="acme"))
    got_b = await ex.execute(make_request(tool, tenant="globex"))
    assert "tenant-a-token" in str(got_a.data)  # raw here: scrubbing happens in normalize
    assert "tenant-a-token" not in str(got_b.data)
    assert base64.b64encode(b"tenant-a-token").decode() not in str(got_b.data)


async def test_upstream_error_is_a_tool_error(tmp_path, make_tool, make_request):
    result = await _executor(tmp_path).execute(make_request(_tool(make_tool, "fail")))
    assert not result.ok and result.error.type == "tool_error"


async def test_a_remote_tool_the_upstream_does_not_offer_is_refused(tmp_path, make_tool, make_request):
    result = await _executor(tmp_path).execute(make_request(_tool(make_tool, "format_disk")))
    assert not result.ok and "does not offer" in result.error.message


async def test_a_changed_upstream_tool_is_logged_and_refused(tmp_path, make_tool, make_request):
    ex = _executor(tmp_path)
    tool = _tool(make_tool, "add")
    assert (await ex.execute(make_request(tool, {"a": 1, "b": 1}))).ok
    (tmp_path / "rug").write_text("now")
    with structlog.testing.capture_logs() as logs:
        result = await ex.execute(make_request(tool, {"a": 1, "b": 1}))
    assert not result.ok and "changed" in result.error.message
    changed = [e for e in logs if e["event"] == "mcp_upstream_tools_changed"]
    assert changed and changed[0]["changed"] == ["add"]


async def test_unknown_upstream_is_a_tool_error(tmp_path, make_tool, make_request):
    tool = make_tool("x", executor={"kind": "mcp", "server": "nope", "remote_tool": "add"})
    result = await _executor(tmp_path).execute(make_request(tool))
    assert not result.ok and "nope" in result.error.message


@pytest.mark.parametrize("spec", [{"transport": "stdio"}, {"transport": "http"}, {"transport": "ftp", "url": "x"},
                                  {"transport": "stdio", "command": "x", "shell": True}])
def test_upstream_config_is_validated(spec):
    with pytest.raises(McpConfigError):
        parse_upstreams({"u": spec})
