"""``limits.tenant_calls_per_minute``: one budget per tenant over all its tools, over gRPC."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Client, demo_config
from gateway.config import ConfigError
from gateway.testing import calls_recorded, start_gateway


async def test_a_tenant_over_its_budget_is_rate_limited_on_every_tool_and_others_are_not(tmp_path: Path):
    config = demo_config(tmp_path, limits={"tenant_calls_per_minute": 3})
    running = await start_gateway(config)
    agent, other = Client(running.address), Client(running.address, api_key="other-tenant-key")
    try:
        spent = [(await agent.call(tool, "{}")).code for tool in ("count_call", "echo", "count_call")]
        assert spent == ["ok", "ok", "ok"]
        limited = await agent.call("echo", "{}")
        assert limited.code == "rate_limited", limited
        assert limited.refused.retry_after_seconds > 0
        # the tenant's budget, not echo's own (echo has none): the reason must not blame the tool
        assert list(limited.refused.reasons) == [
            "rate limit reached for echo: tenant acme's 3 calls a minute over all tools"], limited
        assert (await agent.call("count_call", "{}")).code == "rate_limited"  # every tool of the tenant
        assert (await other.call("count_call", "{}")).code == "ok"  # another tenant has its own budget
    finally:
        await agent.close()
        await other.close()
        await running.stop()
    assert calls_recorded(Path(config.data_path) / "sandbox", "count_call") == 3


def test_the_tenant_budget_must_not_be_negative(tmp_path: Path):
    with pytest.raises(ConfigError) as info:
        demo_config(tmp_path, limits={"tenant_calls_per_minute": -1})
    assert "tenant_calls_per_minute" in str(info.value)
