"""A call narrowed to hosts is never run by an executor that cannot hold a process to hosts.

``constraints.hosts`` (the descriptor's, narrowed by the policy's) says where a call and its
credentials may go. The http executor and an HTTP MCP upstream enforce it; a subprocess tool and a
stdio MCP upstream are processes that can reach any host, so a call carrying the narrowing is
refused ``egress_denied`` before anything starts, and a subprocess descriptor that sets it is
refused at load.
"""

from __future__ import annotations

import sys

import pytest
import yaml

from gateway.config import ConfigError, load_config
from gateway.credentials import ResolvedCredentials
from gateway.executors.mcp import McpExecutor, parse_upstreams
from gateway.executors.subprocess import SubprocessExecutor
from tests.conftest import DEMO_CONFIG, audit_steps

PY = sys.executable
TOUCH = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran')"


def _subprocess_tool(make_tool, marker):
    return make_tool("cmd", executor={"kind": "subprocess", "argv": [PY, "-c", TOUCH, str(marker)]})


@pytest.mark.parametrize("hosts", [["api.example.com"], [], "api.example.com"])
async def test_a_subprocess_call_narrowed_to_hosts_is_refused_before_it_starts(tmp_path, make_tool, make_request,
                                                                                hosts):
    marker = tmp_path / "ran"
    creds = ResolvedCredentials(env={"API_TOKEN": "tok-123"}, hosts=None, secret_values=frozenset({"tok-123"}))
    result = await SubprocessExecutor().execute(
        make_request(_subprocess_tool(make_tool, marker), constraints={"hosts": hosts}, credentials=creds))
    assert not result.ok and result.error.type == "egress_denied", result
    assert not result.error.retryable
    assert "cannot be confined to hosts" in result.error.message
    assert not marker.exists()


@pytest.mark.parametrize("constraints", [{}, {"hosts": None}, {"root": "w"}])
async def test_a_subprocess_call_without_hosts_runs(tmp_path, make_tool, make_request, constraints):
    marker = tmp_path / "ran"
    result = await SubprocessExecutor().execute(
        make_request(_subprocess_tool(make_tool, marker), constraints=constraints))
    assert result.ok, result
    assert marker.read_text() == "ran"


async def test_a_stdio_mcp_call_narrowed_to_hosts_is_refused_before_the_server_starts(tmp_path, make_tool,
                                                                                      make_request):
    marker = tmp_path / "started"
    executor = McpExecutor(parse_upstreams({"notes": {
        "transport": "stdio", "command": PY, "args": ["-c", TOUCH, str(marker)]}}))
    tool = make_tool("notes_add", executor={"kind": "mcp", "server": "notes", "remote_tool": "add"})
    result = await executor.execute(make_request(tool, {"a": 1, "b": 2}, constraints={"hosts": ["example.com"]}))
    assert not result.ok and result.error.type == "egress_denied", result
    assert "stdio MCP upstream notes" in result.error.message
    assert not marker.exists()


def test_a_subprocess_descriptor_with_hosts_is_refused_at_load(tmp_path):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["tools"] = [{"name": "fetcher", "risk": {"side_effect": "read"}, "constraints": {"hosts": ["api.example.com"]},
                     "executor": {"kind": "subprocess", "argv": ["curl", "{url}"]}}]
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "constraints.hosts cannot be enforced for a subprocess tool" in str(err.value) and "'fetcher'" in str(err.value)


NARROWING_POLICY = """package toolgate
import rego.v1
decision := {"decision": "allow", "reasons": ["narrowed"], "constraints": {"hosts": ["api.example.com"]}}
visible := true
"""


async def test_through_the_gateway_a_policy_narrowing_a_subprocess_tool_is_egress_denied_and_audited(tmp_path):
    from tests.conftest import call_once, demo_config, policy_bundle

    bundle = policy_bundle(tmp_path / "narrowing", NARROWING_POLICY)
    marker = tmp_path / "ran"
    tool = {"name": "touch", "risk": {"side_effect": "read"}, "input_schema": {"type": "object"},
            "executor": {"kind": "subprocess", "argv": [PY, "-c", TOUCH, str(marker)]}}
    cfg = demo_config(tmp_path, policy={"bundle": str(bundle)})
    cfg = cfg.model_copy(update={"tools": [*cfg.tools, type(cfg.tools[0]).model_validate(tool)]})
    resp = await call_once(cfg, "touch", "{}")
    assert resp.code == "egress_denied", resp
    assert resp.observation.error.type == "egress_denied" and not marker.exists()
    steps = [s for s in audit_steps(cfg.audit_path) if s["stage"] == "execute"]
    assert steps and steps[-1]["code"] == "egress_denied", steps
    assert "cannot be confined to hosts" in resp.observation.error.message


async def test_a_subprocess_call_whose_credentials_are_narrowed_to_hosts_is_refused(tmp_path, make_tool, make_request):
    """A credential resolver of one's own may narrow the credentials' hosts without the constraints."""
    marker = tmp_path / "ran"
    creds = ResolvedCredentials(env={"API_TOKEN": "tok-123"}, hosts=("api.example.com",),
                                secret_values=frozenset({"tok-123"}))
    result = await SubprocessExecutor().execute(make_request(_subprocess_tool(make_tool, marker), credentials=creds))
    assert not result.ok and result.error.type == "egress_denied", result
    assert not marker.exists()
