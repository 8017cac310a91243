"""Arguments at the edges of JSON and JSON Schema, black-box over a real socket.

- ``pattern`` is ECMA-262: ``"A-100\\n"`` is not an order id, so it cannot slip past the
  refund tool's idempotency key (derived from ``order_id``) to refund an order twice;
- ``format`` is checked, and a tool schema naming a pattern or format the gateway cannot
  enforce does not load;
- ``{"id": 1.0, "z": -0.0}`` hashes as ``{"id":1,"z":0}``, and that is what the tool gets;
- an integer literal past Python's 4,300-digit limit is invalid arguments (or evidence).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import yaml

from gateway.arguments import args_hash
from gateway.config import ConfigError, load_config
from gateway.testing import start_gateway
from tests.conftest import (
    DEMO_CONFIG, TEST_TOOLS, Client, audit_records, audit_steps, config_file_with_tool, demo_config,
)

ARGV_PRINTER = "import json, sys; print(json.dumps(sys.argv[1:]))"

EDGE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "open_link",
        "description": "returns its arguments; url must be a URI",
        "input_schema": {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}}, "required": ["url"]},
        "risk": {"side_effect": "none"},
        "executor": {"kind": "python", "callable": "gateway.testing:echo"},
    },
    {
        "name": "lookup_ticket",
        "description": "returns its arguments; ticket ids are T- and three digits",
        "input_schema": {"type": "object", "properties": {"ticket": {"type": "string", "pattern": "^T-\\d{3}$"}}},
        "risk": {"side_effect": "none"},
        "executor": {"kind": "python", "callable": "gateway.testing:echo"},
    },
    {
        "name": "argv_echo",
        "description": "prints the argv it was given, as JSON",
        "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}, "z": {"type": "number"}}},
        "risk": {"side_effect": "none"},
        "executor": {"kind": "subprocess", "argv": [sys.executable, "-c", ARGV_PRINTER, "{id}", "{z}"],
                     "options": {"output": "json", "allow_dash_values": True}},
    },
]


@pytest.fixture
async def edge_client(tmp_path):
    tools = yaml.safe_load(DEMO_CONFIG.read_text())["tools"] + TEST_TOOLS + EDGE_TOOLS
    running = await start_gateway(demo_config(tmp_path, tools=tools))
    client = Client(running.address)
    try:
        yield client, running
    finally:
        await client.close()
        await running.stop()


def _steps(running, decision_id: str) -> dict[str, str]:
    return {s["stage"]: s["code"] for s in audit_steps(running.app.config.audit_path) if s["decision_id"] == decision_id}


def _executed(running, decision_id: str) -> bool:
    records = [r for r in audit_records(running.app.config.audit_path) if r.get("decision_id") == decision_id]
    return records[-1]["stage"] == "result" and records[-1]["executed"]


async def test_an_order_id_with_a_trailing_newline_cannot_refund_an_order_twice(edge_client):
    client, running = edge_client
    first = await client.call("refund", '{"order_id": "A-100", "amount": 50}')
    assert first.WhichOneof("outcome") == "observation" and first.observation.status == "ok"
    again = await client.call("refund", '{"order_id": "A-100\\n", "amount": 60}')
    assert again.refused.code == "invalid_arguments" == again.code
    assert [e.path for e in again.refused.field_errors] == ["/order_id"]
    assert again.args_hash == ""
    assert _steps(running, again.decision_id)["validate"] == "invalid_arguments"
    assert not _executed(running, again.decision_id)


@pytest.mark.parametrize("ticket", ["T-١٠٠", "T-１００", "T-100\n"])
async def test_only_ascii_digits_are_digits(edge_client, ticket):
    client, running = edge_client
    resp = await client.call("lookup_ticket", json.dumps({"ticket": ticket}))
    assert resp.refused.code == "invalid_arguments"
    assert [e.path for e in resp.refused.field_errors] == ["/ticket"]
    assert not _executed(running, resp.decision_id)
    ok = await client.call("lookup_ticket", '{"ticket": "T-100"}')
    assert ok.WhichOneof("outcome") == "observation"


async def test_a_value_that_is_not_of_its_format_is_invalid_arguments(edge_client):
    client, running = edge_client
    bad = await client.call("open_link", '{"url": "not a uri"}')
    assert bad.refused.code == "invalid_arguments"
    assert [(e.path, "uri" in e.message) for e in bad.refused.field_errors] == [("/url", True)]
    assert not _executed(running, bad.decision_id)
    good = await client.call("open_link", '{"url": "https://example.com/a"}')
    assert good.WhichOneof("outcome") == "observation"
    assert json.loads(good.observation.data_json) == {"url": "https://example.com/a"}


async def test_the_tool_gets_the_numbers_that_were_hashed(edge_client):
    client, _ = edge_client
    plain = await client.call("argv_echo", '{"id": 1, "z": 0}')
    spelled = await client.call("argv_echo", '{"id": 1.0, "z": -0.0}')
    assert plain.args_hash == spelled.args_hash == args_hash({"id": 1, "z": 0})
    for resp in (plain, spelled):
        assert resp.observation.status == "ok", resp
        assert json.loads(resp.observation.data_json) == ["1", "0"]


async def test_numbers_past_2_53_and_small_ones_reach_argv_as_the_approver_saw_them(edge_client):
    client, _ = edge_client
    resp = await client.call("argv_echo", '{"id": 7, "z": 1e20}')  # a float past 2^53 stays a float
    assert json.loads(resp.observation.data_json) == ["7", "100000000000000000000"]  # not Python's 1e+20
    resp = await client.call("argv_echo", '{"id": 7, "z": 1.5e-7}')
    assert json.loads(resp.observation.data_json) == ["7", "1.5e-7"]  # RFC 8785's form, not 1.5e-07


async def test_a_python_tool_gets_ints_for_integral_numbers(edge_client):
    client, _ = edge_client
    resp = await client.call("echo", '{"n": 2.0, "nested": [-0.0, 1e2], "half": 0.5}')
    echoed = json.loads(resp.observation.data_json)  # "2" reads back as int, "2.0" as float
    assert echoed == {"n": 2, "nested": [0, 100], "half": 0.5}
    assert [type(v) for v in (echoed["n"], *echoed["nested"], echoed["half"])] == [int, int, int, float]


async def test_an_integer_past_pythons_digit_limit_is_invalid_arguments(edge_client):
    client, running = edge_client
    resp = await client.call("echo", b'{"n": ' + b"1" * 4301 + b"}")
    assert resp.refused.code == "invalid_arguments"
    (error,) = resp.refused.field_errors
    assert "outside ±(2^53-1)" in error.message
    assert _steps(running, resp.decision_id)["validate"] == "invalid_arguments"


async def test_an_integer_past_pythons_digit_limit_in_evidence_is_invalid_evidence(edge_client):
    client, running = edge_client
    resp = await client.call("echo", b"{}", evidence_json=b'{"n": -' + b"9" * 5000 + b"}")
    assert resp.refused.code == "invalid_evidence"
    (error,) = resp.refused.field_errors
    assert "outside ±(2^53-1)" in error.message
    assert _steps(running, resp.decision_id)["validate"] == "invalid_evidence"


@pytest.mark.parametrize("pattern", ["^[A-Z]+\\Z", "(?P<id>[0-9]+)", "(unclosed"])
def test_a_tool_whose_pattern_is_not_ecma_262_does_not_load(tmp_path, pattern):
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": pattern}}}
    with pytest.raises(ConfigError) as caught:
        load_config(config_file_with_tool(tmp_path, schema))
    message = str(caught.value)
    assert "'lookup_order'" in message and repr(pattern) in message and "ECMA-262" in message


def test_a_tool_whose_pattern_property_is_not_ecma_262_does_not_load(tmp_path):
    schema = {"type": "object", "patternProperties": {"(?i)^x-": {"type": "string"}}}
    with pytest.raises(ConfigError, match=r"'lookup_order'.*'\(\?i\)\^x-'.*ECMA-262"):
        load_config(config_file_with_tool(tmp_path, schema))


def test_a_tool_whose_format_is_unchecked_does_not_load(tmp_path):
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "unix-time"}}}
    with pytest.raises(ConfigError, match=r"tools\.0\.input_schema: .*'lookup_order'.*format 'unix-time' has no checker"):
        load_config(config_file_with_tool(tmp_path, schema))
