"""The gateway on the opa engine, against a real OPA server that goes away and comes back."""

from __future__ import annotations

import asyncio

from gateway.testing import calls_recorded, start_gateway
from tests.conftest import Client, audit_steps, demo_config
from tests.policies.policy_opa_server import REGO, OPAServer


async def test_opa_down_denies_every_call_and_calls_flow_again_when_it_is_back(opa_binary, tmp_path):
    opa = OPAServer(opa_binary, REGO, tmp_path)
    opa.start()
    cfg = demo_config(tmp_path, policy={"engine": "opa", "opa_url": opa.url, "timeout_ms": 500, "bundle": str(REGO)})
    running = await start_gateway(cfg)
    client = Client(running.address)
    sandbox = cfg.data_path / "sandbox"
    try:
        assert (await client.call("count_call", '{"n": 0}')).code == "ok"
        opa.stop()
        down = await asyncio.gather(*[client.call("count_call", f'{{"n": {i}}}') for i in range(1, 21)])
        assert {r.code for r in down} == {"policy_unavailable"}
        assert all(r.WhichOneof("outcome") == "refused" for r in down)
        assert calls_recorded(sandbox, "count_call") == 1  # nothing ran while OPA was down
        opa.start()
        back = await client.call("count_call", '{"n": 99}')
        assert back.code == "ok"  # same gateway process, no restart
        assert calls_recorded(sandbox, "count_call") == 2
    finally:
        await client.close()
        await running.stop()
        opa.stop()
    policy = [r for r in audit_steps(cfg.audit_path) if r["stage"] == "policy"]
    assert sum(r["code"] == "policy_unavailable" for r in policy) == 20
