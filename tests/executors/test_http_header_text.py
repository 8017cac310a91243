"""A header value HTTP cannot carry (not ASCII: a credential with an "é" in it) fails the call
as a tool_error naming the header, never the value, and nothing is sent; httpx raised
UnicodeEncodeError, which ended the call as internal_error."""

from __future__ import annotations

import pytest

from gateway.credentials import ResolvedCredentials
from gateway.executors.http import HttpExecutor

SECRET = "tökén-1234567890"


@pytest.fixture
async def executor():
    ex = HttpExecutor()
    yield ex
    await ex.close()


async def test_a_credential_header_that_is_not_ascii_is_named_not_sent(executor, http_server, make_tool, make_request):
    server = http_server()
    tool = make_tool("fetch", executor={"kind": "http", "url": server.base + "/", "options": {"allow_plain_http": True},
                                        "allowed_hosts": [f"127.0.0.1:{server.port}"]})
    creds = ResolvedCredentials(headers={"X-Api-Key": SECRET}, secret_values=frozenset({SECRET}))
    result = await executor.execute(make_request(tool, credentials=creds))
    assert not result.ok and result.error.type == "tool_error" and not result.error.retryable, result
    assert "header 'X-Api-Key' holds characters an HTTP header cannot carry" in result.error.message
    assert SECRET not in result.error.message and server.connections == 0
