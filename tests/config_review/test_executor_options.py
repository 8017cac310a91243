"""Each executor kind's ``options`` are typed and checked at load (``gateway.executors.options``).

A quoted ``"false"`` once turned a safety option on (``bool("false")`` is True): an http tool
then sent plaintext HTTP, a subprocess tool let ``--version`` through. A misspelt option was
ignored, and a bad limit was only found at the call (answered ``outcome_unknown``). Now each
of them is a config error naming the file, the tool and the option.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from gateway.config import ConfigError, load_config
from gateway.testing import start_gateway
from tests.conftest import ROOT, Client
from tests.config_review.conftest import tool_named

ARGV_PRINTER = "import json, sys; print(json.dumps(sys.argv[1:]))"


def _options(tool: str, options: dict[str, Any]):
    return lambda raw: tool_named(raw, tool)["executor"].__setitem__("options", options)


@pytest.mark.parametrize("tool,options,option", [
    ("http_get", {"allow_plain_http": "false"}, "allow_plain_http"),
    ("http_get", {"allow_private_network": "no"}, "allow_private_network"),
    ("http_get", {"allow_private_networks": True}, "allow_private_networks"),
    ("http_get", {"max_response_bytes": "262144"}, "max_response_bytes"),
    ("http_get", {"max_response_bytes": 0}, "max_response_bytes"),
    ("http_get", {"max_redirects": -1}, "max_redirects"),
    ("http_get", {"max_redirects": True}, "max_redirects"),
    ("http_get", {"headers": {"Accept": 1}}, "headers.Accept"),
    ("http_get", {"headers": {"X-A": "a\r\nX-B: b"}}, "headers"),
    ("http_get", {"headers": {"Bad Name": "x"}}, "headers"),
    ("run_command", {"allow_dash_values": "false"}, "allow_dash_values"),
    ("run_command", {"max_output_bytes": -5}, "max_output_bytes"),
    ("run_command", {"output": "JSON"}, "output"),
    ("run_command", {"outptu": "json"}, "outptu"),
    ("read_file", {"allow_plain_http": True}, "allow_plain_http"),  # python tools take no options
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_wrong_option_does_not_load_and_names_file_tool_and_option(demo_with, tool, options, option):
    path = demo_with(_options(tool, options))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"{path}: tools."), message
    assert f".executor.options.{option}: tool '{tool}': " in message, message


def test_an_unknown_option_lists_the_kinds_options(demo_with):
    with pytest.raises(ConfigError) as err:
        load_config(demo_with(_options("http_get", {"allow_private_networks": True})))
    assert "the http executor has no option 'allow_private_networks'" in str(err.value)
    assert "allow_private_network," in str(err.value)


def test_the_demo_options_load_typed(demo_with):
    from gateway.executors.options import HttpOptions, SubprocessOptions

    tool = next(t for t in load_config(demo_with(lambda raw: None)).tools if t.name == "http_get")
    assert tool.executor.options == HttpOptions(max_response_bytes=262144,
                                                headers={"Accept": "application/vnd.github+json"})
    run = next(t for t in load_config(demo_with(lambda raw: None)).tools if t.name == "run_command")
    assert run.executor.options == SubprocessOptions()  # every default: no dash values, 1 MiB, text


def test_a_bad_limit_is_refused_by_serve_before_it_starts(demo_with):
    """It used to load, and each call of the tool then failed in the executor (``outcome_unknown``)."""
    path = demo_with(_options("run_command", {"max_output_bytes": "1MiB"}))
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert "config_invalid" in out.stderr and str(path) in out.stderr
    assert "executor.options.max_output_bytes: tool 'run_command': " in out.stderr


def _argv_echo(raw: dict[str, Any], options: dict[str, Any]) -> None:
    raw["tools"].append({"name": "argv_echo", "input_schema": {"type": "object"}, "risk": {"side_effect": "none"},
                         "executor": {"kind": "subprocess", "argv": [sys.executable, "-c", ARGV_PRINTER, "{flag}"],
                                      "options": {"output": "json", **options}}})


@pytest.mark.parametrize("allow,ran", [(False, False), (True, True)])
async def test_a_gateway_reads_allow_dash_values_as_the_boolean_given(demo_with, allow, ran):
    running = await start_gateway(demo_with(lambda raw: _argv_echo(raw, {"allow_dash_values": allow})))
    client = Client(running.address)
    try:
        resp = await client.call("argv_echo", '{"flag": "--version"}')
    finally:
        await client.close()
        await running.stop()
    assert resp.WhichOneof("outcome") == "observation", resp
    if ran:
        assert resp.observation.status == "ok" and json.loads(resp.observation.data_json) == ["--version"], resp
    else:
        assert resp.observation.status == "error" and "-" in resp.observation.error.message, resp
