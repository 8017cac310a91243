"""OPAEngine's failure translation, through httpx's in-memory transport (no OPA needed).

The translation (status, JSON, decision) is shared by both transports; the built-in HTTP/1.1
client's own wire handling is tested against a fake server in test_policy_opa_http.py.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from policies import OPAEngine, PolicyError


def engine(handler) -> OPAEngine:
    return OPAEngine("http://opa.test", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    "response, code",
    [
        (httpx.Response(500, json={"code": "internal_error", "message": "eval_conflict_error"}), "policy_unavailable"),
        (httpx.Response(400, json={"code": "invalid_parameter"}), "policy_unavailable"),
        (httpx.Response(200, text="not json"), "policy_unavailable"),
        (httpx.Response(200, json=[1]), "policy_unavailable"),
        (httpx.Response(200, json={}), "policy_invalid_decision"),
        (httpx.Response(200, json={"result": {"decision": "maybe"}}), "policy_invalid_decision"),
    ],
    ids=["server_error", "bad_request", "body_not_json", "body_not_object", "undefined", "malformed_decision"],
)
async def test_failures_deny_with_a_code(response, code):
    opa = engine(lambda request: response)
    with pytest.raises(PolicyError) as info:
        await opa.evaluate({})
    assert info.value.code == code
    await opa.close()


async def test_request_shape_and_decision_id():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"], seen["body"] = request.url.path, request.content
        return httpx.Response(200, json={"result": {"decision": "allow"}, "decision_id": "abc"})

    opa = engine(handler)
    decision = await opa.evaluate({"a": 1})
    assert (decision.decision, decision.engine_decision_id) == ("allow", "abc")
    assert seen["path"] == "/v1/data/toolgate/decision"
    assert b'"input"' in seen["body"]
    await opa.close()


@pytest.mark.parametrize("query", ["data.toolgate.decision; x := 1", "data.toolgate.decision\n",
                                   "data.toolgate.decision\n HTTP/1.1\r\nX-Evil: 1"])
def test_query_path_must_be_a_data_path(query):
    """A final newline too: it would reach the request line of OPA's Data API."""
    with pytest.raises(ValueError, match="not a data path"):
        OPAEngine("http://opa.test", query=query)


async def test_an_answer_over_the_cap_is_unavailable_without_reading_it_all():
    """The https path (httpx) caps OPA's answer as the built-in HTTP/1.1 client does."""
    sent = {"bytes": 0}

    async def endless():
        yield b'{"result": {"decision": "allow", "reasons": ["'
        while sent["bytes"] < 64 * 1024 * 1024:
            sent["bytes"] += 1024 * 1024
            yield b"x" * (1024 * 1024)

    opa = engine(lambda request: httpx.Response(200, content=endless()))
    with pytest.raises(PolicyError) as info:
        await opa.evaluate({})
    assert info.value.code == "policy_unavailable" and "over" in str(info.value)
    assert sent["bytes"] <= 17 * 1024 * 1024  # stopped at the cap, not at the end of the answer
    await opa.close()


@pytest.mark.parametrize("policies", [[1], [{"id": "a"}], [{"id": 1, "raw": "x"}], {"a": 1}])
def test_reload_with_a_malformed_policy_list_is_a_load_error(policies, monkeypatch):
    from policies import PolicyLoadError
    from policies import opa as opa_module

    def client(url, timeout_s, ca_file=None):
        return httpx.Client(base_url=url, transport=httpx.MockTransport(
            lambda request: httpx.Response(200, json={"result": policies})))

    monkeypatch.setattr(opa_module, "_sync_client", client)
    engine_ = OPAEngine("http://opa.test")
    before = engine_.version
    with pytest.raises(PolicyLoadError):
        asyncio.run(engine_.reload())
    assert engine_.version == before


async def test_reload_from_an_opa_that_does_not_answer_leaves_the_event_loop_free():
    """The reload's request waits in a thread: an OPA that accepts and never answers held the
    event loop (every call on the gateway) for the reload's 2 s timeout."""
    import socket

    from policies import PolicyLoadError
    from tests._timing import LoopTicks

    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog), never answers
    try:
        engine_ = OPAEngine(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_ms=100)
        started = asyncio.get_running_loop().time()
        async with LoopTicks() as ticks:
            with pytest.raises(PolicyLoadError):
                await engine_.reload()
        waited = asyncio.get_running_loop().time() - started
        assert waited >= 1.5 and ticks.count >= 50, (waited, ticks.count)
        await engine_.close()
    finally:
        silent.close()
