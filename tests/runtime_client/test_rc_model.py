"""OpenAI-style tool calling adapter, tested on recorded responses (no network, no key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime_client import (
    AgentState, Answer, ModelOutputError, OpenAIChatAdapter, StopReason, ToolCall, ToolCalls,
    TrajectoryEval, model_decide, parse_openai_response, run_agent,
)
from runtime_client.testing import ScriptedModel

DATA = Path(__file__).parent / "data"


def recorded(name: str) -> dict:
    return json.loads((DATA / "openai" / name).read_text())


def test_tool_call_response_parses_to_tool_call():
    assert parse_openai_response(recorded("tool_call_lookup_policy.json")) == ToolCall(
        "lookup_policy", {"topic": "refunds"})


def test_content_response_parses_to_answer():
    assert parse_openai_response(recorded("answer.json")) == Answer("Refunds above 500 EUR need a manager.")


def test_several_tool_calls_parse_to_tool_calls():
    decision = parse_openai_response(recorded("parallel_tool_calls.json"))
    assert decision == ToolCalls((ToolCall("read_file", {"path": "a.txt"}), ToolCall("read_file", {"path": "b.txt"})))


@pytest.mark.parametrize("path", sorted((DATA / "openai_malformed").glob("*.json")), ids=lambda p: p.stem)
def test_malformed_response_is_rejected(path, fake):
    tools = fake.list_tools()
    with pytest.raises(ModelOutputError):
        parse_openai_response(json.loads(path.read_text()), tools=tools)


async def test_adapter_builds_request_with_tool_specs(fake):
    bodies = []

    def complete(body):
        bodies.append(body)
        return recorded("answer.json")

    adapter = OpenAIChatAdapter(complete, model="m")
    decision = await adapter.decide([{"role": "user", "content": "hi"}], fake.list_tools())
    assert decision == Answer("Refunds above 500 EUR need a manager.")
    [body] = bodies
    assert body["model"] == "m" and body["messages"] == [{"role": "user", "content": "hi"}]
    lookup = next(t for t in body["tools"] if t["function"]["name"] == "lookup_policy")
    assert lookup["type"] == "function"
    assert lookup["function"]["parameters"]["required"] == ["topic"]


async def test_recorded_model_drives_the_policy_read_trajectory(gateway):
    responses = iter([recorded("tool_call_lookup_policy.json"), recorded("answer.json")])
    adapter = OpenAIChatAdapter(lambda body: next(responses))
    result = await run_agent(AgentState(goal="What is the refund policy?"), model_decide(adapter),
                             gateway, checkpoints=None)
    assert result.stop_reason is StopReason.SUCCESS and result.state.steps == 2
    assert TrajectoryEval(required_tools=("lookup_policy",), expected_stop_reason="success",
                          max_steps=2).evaluate(result.state).passed


async def test_malformed_model_output_stops_invalid_decision(fake, gateway):
    model = ScriptedModel([json.loads((DATA / "openai_malformed" / "duplicate_keys.json").read_text())])
    result = await run_agent(AgentState(goal="x"), model_decide(model), gateway, checkpoints=None)
    assert result.stop_reason is StopReason.INVALID_DECISION
    assert fake.executions() == []
    assert model.requests and "lookup_policy" in model.requests[0][1]


@pytest.mark.parametrize("arguments", ['{"a": 1e400}', '{"a": -1e999}', '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                       '{"a": NaN}', '{"a": 1, "a": 2}'])
def test_tool_arguments_no_reader_could_read_alike_are_refused(arguments):
    """1e400 read as inf, and deep nesting raised a bare RecursionError: both are ModelOutputError,
    as a key twice or NaN was (the gateway's own strict reader, gateway.json_keys.strict_loads)."""
    from runtime_client._model import strict_json_object

    with pytest.raises(ModelOutputError):
        strict_json_object(arguments)
