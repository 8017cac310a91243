"""An MCP upstream's one text block that is JSON nested too deeply to parse is kept as the text
it is (as the HTTP executor keeps such a body), not a RecursionError that ended the call as a
retryable upstream failure."""

from __future__ import annotations

from gateway.executors.mcp import _unwrap


def test_json_nested_too_deeply_to_parse_is_kept_as_text():
    deep = "[" * 200_000 + "]" * 200_000
    assert _unwrap([{"type": "text", "text": deep}]) == deep
    assert _unwrap([{"type": "text", "text": '{"a": [1]}'}]) == {"a": [1]}
