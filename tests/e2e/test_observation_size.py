"""``limits.max_observation_bytes`` bounds the ``data_json`` the agent receives, whatever the
data holds (quotes and control characters grow when a cut JSON text is sent as a string).
Over a real gRPC server, with the echo tool returning what it is given."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.executors.base import ExecResult
from gateway.normalize import normalize
from gateway.testing import start_gateway
from tests.conftest import Client, NormalizeContext, demo_config

CAP = 1000


@pytest.fixture
async def capped(tmp_path):
    running = await start_gateway(demo_config(tmp_path, limits={"max_observation_bytes": CAP}))
    client = Client(running.address)
    try:
        yield client
    finally:
        await client.close()
        await running.stop()


@pytest.mark.parametrize("args, truncated", [
    ({"q": ['"'] * 400}, True),  # 5 bytes each compact, twice that once escaped inside a string
    ({"q": ["\x01"] * 300}, True),  # \u0001: 6 bytes each, 7 once escaped again
    ({"q": list(range(200))}, False),  # under the cap compact, over it with ", " separators
    ({"q": "é" * 600}, True),
])
async def test_data_json_never_exceeds_the_cap(capped, args, truncated) -> None:
    resp = await capped.call("echo", json.dumps(args))
    assert resp.code == "ok" and resp.observation.truncated is truncated
    assert len(resp.observation.data_json) <= CAP
    json.loads(resp.observation.data_json)  # still JSON: a string when cut
    if not truncated:
        assert json.loads(resp.observation.data_json) == args


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.recursive(st.text() | st.integers(-10, 10) | st.booleans(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)),
       st.integers(16, 400))
def test_any_data_fits_its_cap(data, cap) -> None:
    from gateway.normalize import data_json

    obs = normalize(NormalizeContext(), ExecResult(ok=True, data=data), 1, cap)
    assert len(data_json(obs.data)) <= cap
