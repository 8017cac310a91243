"""The fake gateway refuses a schema whose references do not resolve inside it, as the real one does."""

from __future__ import annotations

import pytest

from runtime_client.testing import FakeGateway


def test_a_remote_reference_is_never_fetched(schema_server):
    base, seen = schema_server
    fake = FakeGateway()
    with pytest.raises(ValueError, match="does not resolve within the schema"):
        fake.add_tool("t", schema={"type": "object", "properties": {"a": {"$ref": f"{base}/a.json"}}})
    assert seen == []


def test_a_local_reference_still_validates():
    fake = FakeGateway()
    fake.add_tool("t", schema={"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}},
                               "$defs": {"s": {"type": "string"}}})
    with fake.client() as client:
        assert client.execute("t", {"a": "x"}).code == "ok"
        assert client.execute("t", {"a": 1}).code == "invalid_arguments"
