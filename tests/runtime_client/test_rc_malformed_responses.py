"""A gateway (or something answering in its place) that sends malformed responses: the
client raises a typed TransportError and the loop stops ``tool_failure``, never a raw crash."""

from __future__ import annotations

import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from runtime_client import AgentState, AsyncGatewayClient, StopReason, ToolCall, TransportError, run_agent
from runtime_client._fake_server import serve_servicer


class _Broken(pb_grpc.ToolGatewayServicer, pb_grpc.ApprovalsServicer):
    """Answers with valid protobuf whose JSON and time fields cannot be read."""

    async def ListTools(self, request, context):
        return pb.ListToolsResponse(tools=[pb.ToolInfo(
            name="lookup", input_schema_json='{"type": "object"}', risk=pb.Risk(side_effect="read"))])

    async def ExecuteTool(self, request, context):
        if request.tool == "pause":  # a timestamp no datetime can hold
            return pb.ToolCallResponse(code="approval_required", approval_required=pb.ApprovalRequired(
                approval_id="apr-1", expires_at={"seconds": 2**62}))
        return pb.ToolCallResponse(decision_id="d-1", code="ok", observation=pb.Observation(
            status="ok", data_json=b"{not json", trust="untrusted"))

    async def Get(self, request, context):
        return pb.Approval(approval_id=request.approval_id, status="pending", args_json=b"\xff\xfe")


async def test_malformed_observation_json_is_a_transport_error():
    async with serve_servicer(_Broken()) as address, AsyncGatewayClient(address, api_key="k") as client:
        with pytest.raises(TransportError, match="malformed"):
            await client.execute("lookup", {})
        with pytest.raises(TransportError, match="malformed"):
            await client.execute("pause", {})
        # an approval's arguments that do not parse are named as its damage, not an error: the
        # status must still be learnt (tests/runtime_client/test_rc_damaged_approval.py)
        got = await client.get_approval("apr-1")
        assert (got.status, got.args, got.damage) == ("pending", {}, "args_json: not a JSON object")


async def test_malformed_observation_stops_run_with_tool_failure():
    async with serve_servicer(_Broken()) as address, AsyncGatewayClient(address, api_key="k") as client:
        result = await run_agent(AgentState(goal="x"), lambda s: ToolCall("lookup", {}), client,
                                 checkpoints=None)
    assert result.stop_reason is StopReason.TOOL_FAILURE
    assert result.state.observations[-1].code == "transport_error"


def test_a_response_nested_past_the_parser_is_a_transport_error():
    """A bare RecursionError escaped the client's reading of a result's data or a tool's schema."""
    from runtime_client._grpc import _json

    with pytest.raises(TransportError, match="malformed"):
        _json(b"[" * 100_000 + b"]" * 100_000)
