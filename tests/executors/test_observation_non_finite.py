"""An observation's data is JSON every reader takes: a NaN or an infinity in a tool's result (a
Python tool's float, ``NaN`` in an upstream's JSON, which Python's reader accepts) is sent as its
name in a string, never as the bare ``NaN`` that JavaScript's or Go's JSON readers refuse."""

from __future__ import annotations

import pytest

from gateway.executors.base import ExecResult
from gateway.executors.http import HttpExecutor
from gateway.json_keys import strict_loads
from gateway.jsonable import jsonable
from gateway.normalize import data_json, normalize
from tests.executors._helpers import call_context


def test_non_finite_floats_become_their_names():
    data = {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": {"d": 2}}
    assert jsonable(data) == {"a": "NaN", "b": ["Infinity", "-Infinity", 1.5], "c": {"d": 2}}
    assert jsonable(float("nan")) == "NaN"


def test_finite_data_is_used_as_it_is():
    data = {"a": 1.5, "b": [1, "x", None, True]}
    assert jsonable(data) is data


async def test_an_upstream_answering_nan_is_observed_as_strict_json(http_server, make_tool, make_request):
    body = b'{"price": NaN, "max": Infinity, "min": -Infinity, "ok": 1}'
    server = http_server({"/p": lambda seen: (200, {"content-type": "application/json"}, body)})
    tool = make_tool("fetch", executor={"kind": "http", "url": server.base + "/p", "allowed_hosts": ["127.0.0.1"],
                                        "options": {"allow_plain_http": True}})
    executor = HttpExecutor()
    try:
        result = await executor.execute(make_request(tool))
    finally:
        await executor.close()
    obs = normalize(call_context(tool), result, 1, 64 * 1024)
    sent = strict_loads(data_json(obs.data))  # what the response carries: read by a strict reader
    assert sent["body"] == {"price": "NaN", "max": "Infinity", "min": "-Infinity", "ok": 1}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1, float("-inf")]])
def test_a_python_tools_non_finite_result_is_observed_as_strict_json(make_tool, value):
    tool = make_tool("calc")
    obs = normalize(call_context(tool), ExecResult(ok=True, data={"v": value}), 1, 64 * 1024)
    strict_loads(data_json(obs.data))
