"""End to end through a real ``toolgate serve`` process: credentials never leak, never cross tenants.

Tools deliberately echo their credentials (raw and encoded, to stdout and stderr). Nothing of
either tenant's secret may appear in the observations, the audit log, the store or the
server's own output.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from urllib.parse import quote

import yaml

from gateway.scrub import encoded_forms
from gateway.testing import GatewayProcess
from tests.conftest import DEMO_CONFIG, Client

DATA = Path(__file__).parent / "data"
TOKEN_A = "acme-Sup3r/Secret+Token=42"
TOKEN_B = "globex-0th3r_Tenant~Secret"
GLOBEX_KEY = "other-tenant-key"


def _echo_route(seen):
    auth = seen.headers.get("authorization", "")
    body = {"auth": auth, "b64": base64.b64encode(auth.encode()).decode(), "url": quote(auth, safe="")}
    return 200, {"content-type": "application/json"}, json.dumps(body).encode()


def _config(tmp_path: Path, http_base: str, port: int) -> Path:
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["policy"]["bundle"] = str(DEMO_CONFIG.parent.parent / "rego")
    raw["data_dir"] = str(tmp_path / "data")
    cred_env = [{"secret": "api_token", "inject": "env", "name": "API_TOKEN"}]
    raw["tools"] = [
        {"name": "leaky_cmd", "risk": {"side_effect": "read"}, "credentials": cred_env,
         "input_schema": {"type": "object", "properties": {"mode": {"enum": ["ok", "fail"]}}, "required": ["mode"]},
         "executor": {"kind": "subprocess", "argv": [sys.executable, str(DATA / "leaky_tool.py"), "{mode}"],
                      "options": {"output": "json"}}},
        {"name": "leaky_http", "risk": {"side_effect": "read"},
         "credentials": [{"secret": "api_token", "inject": "header", "name": "Authorization",
                          "format": "Bearer {value}"}],
         "executor": {"kind": "http", "url": http_base + "/echo", "allowed_hosts": [f"127.0.0.1:{port}"],
                      "options": {"allow_plain_http": True}}},
    ]
    raw["secrets"] = {"providers": [{"kind": "static", "values": {
        "acme": {"api_token": TOKEN_A}, "globex": {"api_token": TOKEN_B}}}]}
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _leaks(blob: bytes, secret: str) -> list[str]:
    return sorted(f for f in encoded_forms(secret) if len(f) >= 8 and f.encode() in blob)


async def test_echoed_credentials_never_leak_and_never_cross_tenants(tmp_path, http_server):
    upstream = http_server({"/echo": _echo_route})
    gateway = GatewayProcess(_config(tmp_path, upstream.base, upstream.port), data_dir=tmp_path / "data").start()
    responses = []
    try:
        acme, globex = Client(gateway.address), Client(gateway.address, GLOBEX_KEY)
        try:
            for client in (acme, globex):
                for tool, args in (("leaky_cmd", '{"mode": "ok"}'), ("leaky_cmd", '{"mode": "fail"}'),
                                   ("leaky_http", "{}")):
                    responses.append((tool, await client.call(tool, args)))
        finally:
            await acme.close()
            await globex.close()
    finally:
        gateway.stop()
    server_output = gateway.proc.stdout.read().encode()

    ok_cmd = json.loads(responses[0][1].observation.data_json)
    assert responses[0][1].code == "ok" and responses[0][1].observation.redactions >= 8
    assert ok_cmd["raw"] == "[REDACTED]" and "[REDACTED]" in ok_cmd
    assert "token as a key" in ok_cmd.values()
    assert responses[1][1].code == "tool_error" and "[REDACTED]" in responses[1][1].observation.error.message
    assert json.loads(responses[2][1].observation.data_json)["body"]["auth"] == "[REDACTED]"

    # the secrets did reach the tools, each tenant its own
    assert [s.headers["authorization"] for s in upstream.seen] == [f"Bearer {TOKEN_A}", f"Bearer {TOKEN_B}"]

    observations = b"".join(r.SerializeToString() for _, r in responses)
    audit = (tmp_path / "data" / "audit.jsonl").read_bytes()
    store = b"".join(p.read_bytes() for p in (tmp_path / "data").glob("toolgate.db*"))
    for name, blob in (("observations", observations), ("audit", audit), ("store", store),
                       ("server output", server_output)):
        for secret in (TOKEN_A, TOKEN_B):
            assert _leaks(blob, secret) == [], f"{name} leaks {secret[:6]}…"
    assert b"credentials" in audit  # the stage was audited (by reference name)
