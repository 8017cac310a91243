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
from tests.conftest import DEMO_CONFIG, audit_records, audit_steps

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


def _load_with(tmp_path, tools, upstreams=None):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["tools"] = tools
    if upstreams is not None:
        raw["mcp_upstreams"] = upstreams
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


STDIO = {"notes": {"transport": "stdio", "command": "notes-server"}}
HTTP = {"notes": {"transport": "http", "url": "https://notes.example.com/mcp"}}


@pytest.mark.parametrize("kind, extra", [("python", {"callable": "gateway.builtin_tools:echo"}),
                                         ("subprocess", {"argv": ["true"]}),
                                         ("mcp", {"server": "notes"})])
def test_an_allow_list_only_the_http_executor_reads_is_refused_at_load_for_other_kinds(tmp_path, kind, extra):
    tool = {"name": "reader", "risk": {"side_effect": "read"},
            "executor": {"kind": kind, "allowed_hosts": ["api.example.com"], **extra}}
    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, [tool], HTTP)
    assert "executor.allowed_hosts is read by the http executor only" in str(err.value), err.value
    assert f"ignored for a {kind} tool" in str(err.value) and "'reader'" in str(err.value)


def test_a_stdio_mcp_tool_with_hosts_is_refused_at_load_and_an_http_one_loads(tmp_path):
    tool = {"name": "notes_add", "risk": {"side_effect": "write"}, "constraints": {"hosts": ["notes.example.com"]},
            "executor": {"kind": "mcp", "server": "notes", "remote_tool": "add"}}
    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, [tool], STDIO)
    assert "constraints.hosts cannot be enforced for a tool of the stdio MCP upstream 'notes'" in str(err.value)
    assert [t.name for t in _load_with(tmp_path, [tool], HTTP).tools] == ["notes_add"]


def test_a_malformed_mcp_upstream_is_refused_at_load_not_at_its_first_call(tmp_path):
    tool = {"name": "notes_add", "risk": {"side_effect": "write"}, "constraints": {"hosts": ["notes.example.com"]},
            "executor": {"kind": "mcp", "server": "notes", "remote_tool": "add"}}
    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, [tool], {"notes": {"transport": "stdio"}})  # no command
    assert "mcp_upstreams.notes: stdio needs command" in str(err.value), err.value


def test_an_mcp_tool_naming_no_configured_upstream_is_refused_at_load(tmp_path):
    tool = {"name": "notes_add", "risk": {"side_effect": "write"},
            "executor": {"kind": "mcp", "server": "nots", "remote_tool": "add"}}
    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, [tool], HTTP)
    assert "executor.server 'nots' names no entry of mcp_upstreams (notes)" in str(err.value), err.value


NARROWING_POLICY = """package toolgate
import rego.v1
decision := {"decision": "allow", "reasons": ["narrowed"], "constraints": {"hosts": ["api.example.com"]}}
visible := true
"""

APPROVAL_POLICY = """package toolgate
import rego.v1
decision := {"decision": "require_approval", "reasons": ["a person looks first"],
             "approval": {"groups_any": ["ops"]}, "constraints": {"hosts": ["api.example.com"]}}
visible := true
"""


def _gateway_with_touch_tool(tmp_path, policy, marker, **tool_fields):
    from tests.conftest import demo_config, policy_bundle

    bundle = policy_bundle(tmp_path / "narrowing", policy)
    tool = {"name": "touch", "risk": {"side_effect": "read"}, "input_schema": {"type": "object"},
            "executor": {"kind": "subprocess", "argv": [PY, "-c", TOUCH, str(marker)]}, **tool_fields}
    cfg = demo_config(tmp_path, policy={"bundle": str(bundle)})
    return cfg.model_copy(update={"tools": [*cfg.tools, type(cfg.tools[0]).model_validate(tool)]})


async def test_through_the_gateway_a_policy_narrowing_a_subprocess_tool_is_egress_denied_and_audited(tmp_path):
    """Refused at admission, before the write-ahead record: the call is not executed at all."""
    from tests.conftest import call_once

    marker = tmp_path / "ran"
    cfg = _gateway_with_touch_tool(tmp_path, NARROWING_POLICY, marker)
    resp = await call_once(cfg, "touch", "{}")
    assert resp.code == "egress_denied", resp
    assert resp.WhichOneof("outcome") == "refused" and resp.refused.code == "egress_denied", resp
    assert "a subprocess cannot be confined to hosts" in resp.refused.reasons[0]
    assert not marker.exists()
    steps = [s for s in audit_steps(cfg.audit_path) if s.get("decision_id") == resp.decision_id]
    assert [s["code"] for s in steps if s["stage"] == "admit"] == ["egress_denied"], steps
    assert not [s for s in steps if s["stage"] == "execute"], steps
    result = [r for r in audit_records(cfg.audit_path) if r.get("decision_id") == resp.decision_id][-1]
    assert result["stage"] == "result" and result["executed"] is False, result


async def test_no_approval_is_asked_for_a_call_its_executor_could_not_confine(tmp_path):
    """A policy that wants a person to look at a call it also narrows to hosts: no approval request
    is made (an approver would be asked to approve what could never run), and none is stored."""
    from gateway.app import GatewayApp
    from tests.conftest import call_once

    marker = tmp_path / "ran"
    cfg = _gateway_with_touch_tool(tmp_path, APPROVAL_POLICY, marker)
    resp = await call_once(cfg, "touch", "{}")
    assert resp.code == "egress_denied" and resp.refused.code == "egress_denied", resp
    steps = [s for s in audit_steps(cfg.audit_path) if s.get("decision_id") == resp.decision_id]
    assert [(s["stage"], s["code"]) for s in steps if s["stage"] == "approval"] == [("approval", "egress_denied")]
    app = GatewayApp(cfg)
    try:
        assert await app.store.approvals_page(tenant="demo") == []
    finally:
        await app.close()
    assert not marker.exists()


async def test_an_executor_that_does_not_say_it_confines_hosts_gets_no_narrowed_call(tmp_path, make_tool):
    """The capability is asked of the executor centrally: one that does not declare
    ``confines_hosts`` (a new kind, say) is taken to be unable, so nothing relies on each executor
    remembering to check."""
    from gateway.execute import ExecuteStage
    from gateway.executors.base import ExecResult, ExecutorRegistry
    from gateway.models import CallContext, Identity, ToolCall
    from gateway.tools import ToolRegistry
    from policies import PolicyDecision

    class Silent:
        async def execute(self, request):
            return ExecResult(ok=True, data={})

    stage = ExecuteStage(ExecutorRegistry({"python": Silent}), tmp_path)
    tool = make_tool("quiet")
    ctx = CallContext("d-1", Identity("acme", "agent"), ToolCall("quiet", b"{}"), 0.0)
    ctx.tool = ToolRegistry([tool]).resolve("quiet")
    ctx.decision = PolicyDecision(decision="allow", constraints={"hosts": ["api.example.com"]})
    refused = await stage.admit(ctx)
    assert refused is not None and refused.code == "egress_denied", refused
    assert "the python executor cannot be confined to hosts" in refused.reasons[0], refused
    ctx.decision = PolicyDecision(decision="allow")
    assert await stage.admit(ctx) is None


async def test_a_subprocess_call_whose_credentials_are_narrowed_to_hosts_is_refused(tmp_path, make_tool, make_request):
    """A credential resolver of one's own may narrow the credentials' hosts without the constraints."""
    marker = tmp_path / "ran"
    creds = ResolvedCredentials(env={"API_TOKEN": "tok-123"}, hosts=("api.example.com",),
                                secret_values=frozenset({"tok-123"}))
    result = await SubprocessExecutor().execute(make_request(_subprocess_tool(make_tool, marker), credentials=creds))
    assert not result.ok and result.error.type == "egress_denied", result
    assert not marker.exists()
