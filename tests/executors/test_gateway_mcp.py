"""An MCP upstream (a real stdio server written with the mcp package) behind the gateway."""

from __future__ import annotations

import sys

import yaml

from tests.conftest import DEMO_CONFIG, Client
from gateway.config import load_config
from gateway.testing import start_gateway
from tests.executors._helpers import SERVER


async def test_mcp_upstream_through_the_gateway_with_policy(tmp_path):
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["policy"]["bundle"] = str(DEMO_CONFIG.parent.parent / "rego")
    raw["data_dir"] = str(tmp_path / "data")
    raw["mcp_upstreams"] = {"notes": {"transport": "stdio", "command": sys.executable, "args": [SERVER],
                                      "env": {"WIPE_MARKER": str(tmp_path / "wiped")}}}
    raw["tools"] = [
        {"name": "notes_add", "risk": {"side_effect": "read"},
         "executor": {"kind": "mcp", "server": "notes", "remote_tool": "add"}},
        # classified as destructive: the default policy denies it before the upstream is touched
        {"name": "notes_wipe", "risk": {"side_effect": "destructive", "reversibility": "irreversible"},
         "executor": {"kind": "mcp", "server": "notes", "remote_tool": "wipe"}},
    ]
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    running = await start_gateway(load_config(path))
    client = Client(running.address)
    try:
        added = await client.call("notes_add", '{"a": 20, "b": 22}')
        wiped = await client.call("notes_wipe", "{}")
        unclassified = await client.call("wipe", "{}")
        failing = await client.call("fail", "{}")
    finally:
        await client.close()
        await running.stop()
    assert added.code == "ok" and '"sum":42' in added.observation.data_json.decode().replace(" ", "")
    assert added.observation.trust == "untrusted"
    assert wiped.refused.code == "policy_denied"
    assert unclassified.refused.code == "unknown_tool" and failing.refused.code == "unknown_tool"
    assert not (tmp_path / "wiped").exists()
