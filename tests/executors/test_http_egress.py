"""The HTTP executor checks the address it dials, not only the name in the URL.

Real sockets to a real local server. Where a test needs a name to resolve somewhere it
does not on this machine (a rebinding answer), the executor is given a resolver
(``fake_resolver``): DNS is outside the system; what is under test is that the executor
refuses what it is told and dials exactly what it checked.
"""

from __future__ import annotations

import pytest

from gateway.executors.egress_backend import is_public
from gateway.executors.http import HttpExecutor


def _tool(make_tool, url, hosts, **options):
    executor = {"kind": "http", "url": url, "allowed_hosts": hosts, "options": {"allow_plain_http": True, **options}}
    return make_tool("fetch", executor=executor)


@pytest.fixture
async def executor_with():
    made: list[HttpExecutor] = []

    def make(**kw) -> HttpExecutor:
        made.append(HttpExecutor(**kw))
        return made[-1]

    yield make
    for ex in made:
        await ex.close()


async def test_a_name_that_resolves_to_loopback_is_refused_before_connecting(executor_with, http_server, make_tool,
                                                                           make_request):
    server = http_server()
    tool = _tool(make_tool, f"http://localhost:{server.port}/", [f"localhost:{server.port}"])
    result = await executor_with().execute(make_request(tool))
    assert not result.ok and result.error.type == "egress_denied", result
    assert "non-public address" in result.error.message and "allow_private_network" in result.error.message
    assert server.connections == 0


async def test_allow_private_network_lets_a_tool_reach_its_own_network(executor_with, http_server, make_tool,
                                                                       make_request):
    server = http_server()
    tool = _tool(make_tool, f"http://localhost:{server.port}/", [f"localhost:{server.port}"],
                 allow_private_network=True)
    result = await executor_with().execute(make_request(tool))
    assert result.ok, result
    assert server.connections == 1


async def test_an_ip_literal_on_the_list_is_dialled_without_resolving(executor_with, http_server, make_tool,
                                                                      make_request, fake_resolver):
    resolver = fake_resolver({})
    server = http_server()
    tool = _tool(make_tool, server.base + "/", [f"127.0.0.1:{server.port}"])
    result = await executor_with(resolver=resolver).execute(make_request(tool))
    assert result.ok, result
    assert resolver.asked == []


async def test_a_rebinding_answer_is_refused(executor_with, http_server, make_tool, make_request, fake_resolver):
    """A public name whose DNS answer names the metadata service or an inside address."""
    server = http_server()
    for answer in (["169.254.169.254"], ["10.0.0.7"], ["93.184.215.14", "127.0.0.1"], ["::ffff:127.0.0.1"],
                   ["::1"], ["0.0.0.0"], ["64:ff9b::7f00:1"], ["2002:7f00:1::1"]):
        resolver = fake_resolver({"api.example.com": answer})
        tool = _tool(make_tool, f"http://api.example.com:{server.port}/", [f"api.example.com:{server.port}"])
        result = await executor_with(resolver=resolver).execute(make_request(tool))
        assert result.error is not None and result.error.type == "egress_denied", (answer, result)
    assert server.connections == 0


async def test_the_connection_goes_to_the_address_that_was_checked(executor_with, http_server, make_tool,
                                                                  make_request, fake_resolver):
    """Resolved once: the name below does not exist in any DNS, so reaching the server at all
    proves the executor dialled the address it checked instead of looking the name up again."""
    server = http_server()
    resolver = fake_resolver({"inside.toolgate.invalid": ["127.0.0.1"]})
    tool = _tool(make_tool, f"http://inside.toolgate.invalid:{server.port}/", [f"*.toolgate.invalid:{server.port}"],
                 allow_private_network=True)
    result = await executor_with(resolver=resolver).execute(make_request(tool))
    assert result.ok, result
    assert resolver.asked == ["inside.toolgate.invalid"]
    assert server.seen[0].headers["host"] == f"inside.toolgate.invalid:{server.port}"


async def test_a_name_that_does_not_resolve_is_a_retryable_tool_error(executor_with, make_tool, make_request):
    tool = _tool(make_tool, "http://nowhere.toolgate.invalid/", ["nowhere.toolgate.invalid"])
    result = await executor_with().execute(make_request(tool))
    assert result.error is not None and result.error.type == "tool_error" and result.error.retryable, result


async def test_a_wildcard_entry_never_matches_an_ip_literal(executor_with, http_server, make_tool, make_request):
    server = http_server()
    tool = _tool(make_tool, server.base + "/", [f"*.0.0.1:{server.port}"])
    result = await executor_with().execute(make_request(tool))
    assert result.error is not None and result.error.type == "egress_denied"
    assert server.connections == 0


@pytest.mark.parametrize(
    "address, public",
    [
        ("93.184.215.14", True), ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", True), ("8.8.8.8", True),
        ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False),
        ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False),
        ("255.255.255.255", False), ("192.0.2.1", False), ("::1", False), ("::", False), ("fe80::1", False),
        ("fc00::1", False), ("ff02::1", False), ("::ffff:10.0.0.1", False), ("::ffff:8.8.8.8", True),
        ("64:ff9b::a00:1", False), ("64:ff9b::808:808", True), ("2002:a00:1::", False),
        ("::7f00:1", False), ("::a00:1", False), ("::808:808", False),  # IPv4-compatible
        ("::ffff:0:a00:1", False), ("::ffff:0:808:808", False),  # IPv4-translated
        ("64:ff9b:1::a00:1", False), ("fec0::1", False),  # local-use NAT64, site-local
    ],
)
def test_public_addresses(address, public):
    assert is_public(address) is public
