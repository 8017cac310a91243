"""A tool's text with lone surrogates (a Python string or exception, an MCP upstream's ``\\ud800``
escape) is no Unicode, and UTF-8 cannot hold it: the observation says each as its escape (six
characters), the call ends as the tool's result, and its audit record says the same and verifies.
It ended as ``internal_error`` with the call's ``result`` record never written (a type or a message)
or as an answer the caller never received."""

from __future__ import annotations

import json

import pytest

from gateway.audit_verify import verify_file
from gateway.testing import start_gateway
from tests.conftest import Client, audit_records, demo_config

TOOLS = "tests.e2e.data.not_unicode_tools"


def _tool(name: str, function: str) -> dict:
    return {"name": name, "description": "text that is no Unicode", "input_schema": {"type": "object"},
            "risk": {"side_effect": "none"}, "executor": {"kind": "python", "callable": f"{TOOLS}:{function}"}}


@pytest.fixture
def config(tmp_path):
    cfg = demo_config(tmp_path)
    extra = [_tool("bad_type", "bad_error_type"), _tool("bad_message", "bad_error_message"),
             _tool("bad_data", "bad_data")]
    return demo_config(tmp_path, tools=[t.model_dump(mode="json") for t in cfg.tools] + extra)


async def _calls(config, *tools):
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        return [await client.call(tool, "{}") for tool in tools]
    finally:
        await client.close()
        await running.stop()


async def test_error_type_and_message_are_sent_and_audited_as_escapes(config):
    by_type, by_message = await _calls(config, "bad_type", "bad_message")
    assert (by_type.code, by_type.observation.error.type) == ("tool_error", "Bad\\ud800Type"), by_type
    assert (by_message.code, by_message.observation.error.message) == ("tool_error", "bad \\ud800 text")
    results = {r["decision_id"]: r for r in audit_records(config.audit_path) if r["stage"] == "result"}
    for response in (by_type, by_message):
        record = results[response.decision_id]
        assert (record["code"], record["executed"]) == ("tool_error", True), record
    executed = [s for r in results.values() for s in r["steps"] if s["stage"] == "execute"]
    assert "Bad\\ud800Type" in [s.get("error") for s in executed], executed
    assert verify_file(config.audit_path).ok


async def test_data_keys_and_values_are_sent_as_escapes_and_none_is_lost(config):
    (response,) = await _calls(config, "bad_data")
    assert response.code == "ok", response
    data = json.loads(response.observation.data_json)
    # the escaped key meets the tool's own literal one: it is renamed, neither value is lost
    assert data == {"text \\udfff#2": "value \\ud800", "text \\udfff": "literal", "list": ["\\udc80"]}, data
    assert verify_file(config.audit_path).ok
