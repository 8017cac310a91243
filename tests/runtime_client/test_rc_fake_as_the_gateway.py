"""The fake gateway compiles a tool's schema as the real one does: what the gateway would not load,
the fake refuses when the tool is added; what it validates, the fake validates the same way."""

from __future__ import annotations

import pytest

from runtime_client.testing import FakeGateway


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "object", "properties": {"a": {"$ref": "https://schemas.example/a.json"}}}, "does not resolve"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}, "backtrack"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "phone"}}}, "has no checker"),
])
def test_a_schema_the_gateway_would_not_load_is_refused_when_the_tool_is_added(schema, message):
    with pytest.raises(ValueError, match=message):
        FakeGateway().add_tool("t", schema=schema)


def test_a_pattern_is_ecma_262_as_in_the_gateway():
    """Python's re would take "A-1\\n" for ^[A-Z0-9-]+$; ECMA-262 (the gateway's) does not."""
    fake = FakeGateway()
    fake.add_tool("t", schema={"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z0-9-]+$"}}})
    with fake.client() as client:
        assert client.execute("t", {"id": "A-1"}).code == "ok"
        assert client.execute("t", {"id": "A-1\n"}).code == "invalid_arguments"


def test_a_local_reference_still_validates():
    fake = FakeGateway()
    fake.add_tool("t", schema={"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}},
                               "$defs": {"s": {"type": "string"}}})
    with fake.client() as client:
        assert client.execute("t", {"a": "x"}).code == "ok"
        assert client.execute("t", {"a": 1}).code == "invalid_arguments"


def test_the_fake_hashes_arguments_as_the_gateway_does():
    """RFC 8785: 1e20 is written 100000000000000000000, 1.0 as 1 (json.dumps writes 1e+20 and 1.0)."""
    import hashlib

    from runtime_client.testing import args_hash

    assert args_hash({"n": 1e20, "m": 1.0}) == "sha256:" + hashlib.sha256(b'{"m":1,"n":100000000000000000000}').hexdigest()
