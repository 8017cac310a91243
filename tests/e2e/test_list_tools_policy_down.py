"""ListTools when the policy cannot say which tools a caller may see. A failing check hid its tool,
so with OPA down (or a ``visible`` rule that fails for every tool) the answer was an empty list:
``toolgate tools`` printed nothing and exited 0, as if the agent had no tools. Now a check that
fails still hides its tool, and when every check fails the call is refused (UNAVAILABLE,
audited ``policy_unavailable``)."""

from __future__ import annotations

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.testing import start_gateway
from tests.conftest import Client, audit_records, demo_config, policy_bundle
from tests.policies.policy_opa_server import free_port

HEADER = 'package toolgate\nimport rego.v1\ndecision := {"decision": "allow", "reasons": []}\n'


async def _list(cfg) -> tuple[list[str] | None, grpc.aio.AioRpcError | None]:
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        reply = await client.stub.ListTools(pb.ListToolsRequest(), metadata=client.metadata, timeout=10)
        return sorted(t.name for t in reply.tools), None
    except grpc.aio.AioRpcError as exc:
        return None, exc
    finally:
        await client.close()
        await running.stop()


async def test_every_check_failing_is_a_refusal_not_an_empty_list(tmp_path):
    cfg = demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "b", HEADER + (
        'visible if to_number("not a number") > 0\n')))})
    tools, error = await _list(cfg)
    assert tools is None and error.code() == grpc.StatusCode.UNAVAILABLE, tools
    assert "could not decide which tools" in error.details()
    refused = [r for r in audit_records(cfg.audit_path) if r.get("method", "").endswith("/ListTools")]
    assert refused and refused[-1]["code"] == "policy_unavailable", refused


async def test_opa_unreachable_is_a_refusal(tmp_path):
    cfg = demo_config(tmp_path, policy={"engine": "opa", "opa_url": f"http://127.0.0.1:{free_port()}",
                                        "timeout_ms": 300, "bundle": "rego"})
    tools, error = await _list(cfg)
    assert tools is None and error.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("tool", ["read_file", "echo"])  # the first tool in the config's order, and a later one
async def test_a_check_failing_for_some_tools_hides_only_those(tmp_path, tool):
    failing = f'input.tool.name == "{tool}"'
    rego = HEADER + f'visible if {{ {failing}; to_number("x") > 0 }}\nvisible if not {failing}\n'
    cfg = demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "b", rego))})
    assert cfg.tools[0].name == "read_file"
    tools, error = await _list(cfg)
    assert error is None and tools and tool not in tools and "lookup_policy" in tools, (tools, error)
