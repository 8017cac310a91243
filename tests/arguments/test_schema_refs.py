"""A tool schema's references resolve inside the schema when it loads, and are never fetched.

jsonschema fetches a ``$ref`` it cannot resolve locally with ``urlopen`` on every validation
that reaches it; these tests serve a schema over real HTTP on 127.0.0.1 and check that the
gateway neither loads such a tool nor ever asks the server for it.
"""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from pydantic import ValidationError

from gateway.arguments import SchemaValidator
from gateway.config import ToolConfig
from gateway.ecma_regex import schema_problems


@pytest.fixture
def schema_server():
    """A real HTTP server on 127.0.0.1 serving ``{"type": "string"}`` at any path: yields (its base
    URL, the paths asked for), so a test can show that a schema reference was never fetched."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            hits.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _tool(schema: dict) -> ToolConfig:
    return ToolConfig.model_validate({"name": "t", "risk": {"side_effect": "read"},
                                      "executor": {"kind": "python", "callable": "x:y"}, "input_schema": schema})


@pytest.mark.parametrize("where", ["properties", "top", "dynamic"])
def test_a_remote_reference_is_refused_at_load_and_never_fetched(schema_server, where):
    base, hits = schema_server
    ref = f"{base}/name.json"
    schema = {
        "properties": {"type": "object", "properties": {"name": {"$ref": ref}}},
        "top": {"type": "object", "$ref": ref},
        "dynamic": {"type": "object", "properties": {"name": {"$dynamicRef": ref}}},
    }[where]
    with pytest.raises(ValidationError, match="does not resolve within the schema"):
        _tool(schema)
    with pytest.raises(ValueError, match="references are never fetched"):
        SchemaValidator.compile(schema)
    assert hits == []


@pytest.mark.parametrize("ref", ["#/nope", "#/$defs/missing", "#missing-anchor", "other.json", "#/properties/a/0"])
def test_a_reference_to_nowhere_is_refused_at_load(ref):
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": ref}}, "$defs": {}}
    problems = schema_problems(schema)
    assert len(problems) == 1 and f"$ref {ref!r} does not resolve" in problems[0]


def test_a_broken_reference_inside_a_definition_is_reported_once():
    schema = {"$defs": {"a": {"$ref": "#/nope"}}, "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"$ref": "#/$defs/a"}}}
    assert len(schema_problems(schema)) == 1


@pytest.mark.parametrize(("target", "message"), [
    ({"type": "string", "pattern": "(["}, "is not an ECMA-262 regular expression"),
    ({"type": "string", "format": "phone"}, "has no checker"),
    ({"type": "strong"}, "not a valid JSON Schema 2020-12"),
    ("just text", "not a valid JSON Schema 2020-12"),
])
def test_what_a_reference_points_at_outside_the_subschemas_is_checked_as_a_schema(target, message):
    """``#/x-lib/…`` is no subschema position, so the meta-schema check of the document never saw it."""
    schema = {"type": "object", "properties": {"a": {"$ref": "#/x-lib/a"}}, "x-lib": {"a": target}}
    problems = schema_problems(schema)
    assert len(problems) == 1 and problems[0].startswith("at $ref '#/x-lib/a': ") and message in problems[0]


def test_data_that_looks_like_a_schema_is_left_alone_when_nothing_refers_to_it():
    schema = {"type": "object", "x-lib": {"a": {"pattern": "(["}}, "default": {"pattern": "(["}}
    assert schema_problems(schema) == []


@pytest.mark.parametrize(("schema", "good", "bad"), [
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}}, "$defs": {"s": {"type": "string"}}},
     {"a": "x"}, {"a": 1}),
    ({"$id": "https://tools.example/root", "type": "object", "properties": {"a": {"$ref": "item"}},
      "$defs": {"i": {"$id": "item", "type": "string"}}}, {"a": "x"}, {"a": 1}),
    ({"type": "object", "properties": {"a": {"$ref": "#s"}}, "$defs": {"s": {"$anchor": "s", "maxLength": 2}}},
     {"a": "xy"}, {"a": "xyz"}),
    ({"type": "object", "properties": {"id": {"type": "string"}, "child": {"$ref": "#"}}, "required": ["id"]},
     {"id": "a", "child": {"id": "b"}}, {"id": "a", "child": {}}),
    ({"$ref": "#/$defs/node", "$defs": {"node": {"$dynamicAnchor": "node", "type": "object",
                                                  "properties": {"kids": {"type": "array",
                                                                          "items": {"$dynamicRef": "#node"}}}}}},
     {"kids": [{"kids": []}]}, {"kids": [1]}),
    ({"type": "object", "properties": {"a": {"$ref": "#/x-lib/a"}}, "x-lib": {"a": {"type": "string",
                                                                                    "pattern": "^[a-z]+$"}}},
     {"a": "abc"}, {"a": "ABC"}),
])
def test_references_inside_the_schema_load_and_validate(schema, good, bad):
    validator = SchemaValidator.compile(schema)
    assert validator.errors(good) == []
    assert validator.errors(bad) != []


@pytest.mark.parametrize("ref", ["https://json-schema.org/draft/2020-12/schema",
                                 "https://json-schema.org/draft/2020-12/meta/validation",
                                 "http://json-schema.org/draft-07/schema#"])
def test_a_reference_to_a_shipped_meta_schema_is_refused(ref):
    """jsonschema would resolve it without fetching, but validate that part with its own class (named
    by the meta-schema's $schema): Python re patterns and a quadratic uniqueItems, not the gateway's."""
    schema = {"type": "object", "properties": {"s": {"$ref": ref}}}
    problems = schema_problems(schema)
    assert len(problems) == 1 and f"$ref {ref!r} does not resolve within the schema" in problems[0]


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
     "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
     "$defs": {"a": {"allOf": [{"type": "object"}, {"not": {"$ref": "#/$defs/b"}}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}},
    {"$defs": {"a": {"if": {"$ref": "#"}}}, "$ref": "#/$defs/a"},
    {"$dynamicAnchor": "meta", "dependentSchemas": {"k": {"$dynamicRef": "#meta"}}},
])
def test_references_that_recurse_without_reaching_into_the_arguments_are_refused(schema):
    """Each would raise RecursionError on every call."""
    problems = schema_problems(schema)
    assert len(problems) == 1 and "validating would recurse without end" in problems[0], problems


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"child": {"$ref": "#"}}},
    {"$defs": {"node": {"type": "object", "properties": {"kids": {"items": {"$ref": "#/$defs/node"}}}}},
     "allOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/node"}]},
    {"$defs": {"a": {"type": "string"}}, "anyOf": [{"$ref": "#/$defs/a"}, {"not": {"$ref": "#/$defs/a"}}]},
])
def test_recursion_through_a_part_of_the_arguments_loads(schema):
    assert schema_problems(schema) == []
