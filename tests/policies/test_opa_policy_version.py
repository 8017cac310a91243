"""On the opa engine the calls are audited under the version of the policy OPA serves. OPA loads
its bundles itself: the version stood at ``opa:<url>`` from the start until a SIGHUP, whatever
OPA served, so every record credited its decisions to an unknown policy. The gateway now asks
OPA at start and every 30 s, and audits ``policy_changed``. A real OPA server, changed through
its REST API as a bundle download would change it."""

from __future__ import annotations

import asyncio

import httpx

from gateway.testing import start_gateway
from tests.conftest import Client, audit_records, demo_config
from tests.policies.policy_opa_server import REGO, OPAServer

DENY_ALL = """package toolgate
import rego.v1
visible := true
decision := {"decision": "deny", "reasons": ["closed for the test"]}
"""


async def _settled_version(app, not_this: str) -> str:
    for _ in range(200):
        if app.engine.version != not_this:
            return app.engine.version
        await asyncio.sleep(0.02)
    return app.engine.version


async def test_calls_carry_the_version_opa_serves_and_a_change_is_audited(opa_binary, tmp_path):
    opa = OPAServer(opa_binary, REGO, tmp_path)
    opa.start()
    cfg = demo_config(tmp_path, policy={"engine": "opa", "opa_url": opa.url, "timeout_ms": 500, "bundle": str(REGO)})
    running = await start_gateway(cfg)
    client = Client(running.address)
    try:
        first = await _settled_version(running.app, f"opa:{opa.url}")
        assert first.startswith("opa:sha256:"), first  # asked at start, not the URL
        allowed = await client.call("echo", "{}")
        assert allowed.code == "ok" and allowed.policy_version == first

        async with httpx.AsyncClient() as http:  # what a bundle download does to OPA's policies
            put = await http.put(f"{opa.url}/v1/policies/zz_deny_all", content=DENY_ALL)
        assert put.status_code == 200, put.text
        assert await running.app.refresh_policy_version() is True
        second = running.app.engine.version
        assert second != first and second.startswith("opa:sha256:")
        assert await running.app.refresh_policy_version() is False  # nothing changed since
    finally:
        await client.close()
        await running.stop()
        opa.stop()
    changed = [r for r in audit_records(cfg.audit_path) if r.get("stage") == "policy_changed"]
    assert [(r["previous"], r["policy_version"]) for r in changed][-1] == (first, second), changed
