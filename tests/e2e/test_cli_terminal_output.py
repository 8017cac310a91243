"""What ``toolgate call`` and ``toolgate audit search`` print from agents, tools and log files
cannot draw on the terminal (C1 controls such as CSI, bidi overrides, zero-width characters,
lone surrogates are JSON escapes; the JSON is the same), and a malformed record is skipped,
never a traceback. Real CLI processes, a real `toolgate serve`, real audit files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

from gateway.audit import AuditLog
from gateway.testing import GatewayProcess
from tests.conftest import AGENT_KEY, DEMO_CONFIG, ROOT, TEST_TOOLS

HOSTILE = "\u009b2J\u009b31mall clear\u202eevil\u200b\u2028"  # CSI (8-bit), bidi override, zero width, line sep


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONIOENCODING": "utf-8"})


def _drawing(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on or that hide what is there."""
    return [c for c in text if c not in "\n" and (unicodedata.category(c)[0] == "C"
                                                  or unicodedata.category(c) in ("Zl", "Zp"))]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gw")
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["tools"] += [t for t in TEST_TOOLS if t["name"] == "echo"]
    raw["data_dir"] = str(tmp / "data")
    raw["policy"]["bundle"] = str(ROOT / "rego")
    config = tmp / "toolgate.yaml"
    config.write_text(yaml.safe_dump(raw))
    proc = GatewayProcess(config, data_dir=tmp / "data").start()
    yield proc
    proc.stop()


def test_call_escapes_what_the_tool_returned(served):
    out = _cli("call", "echo", "--args", json.dumps({"note": HOSTILE}), "--target", served.address,
               "--api-key", AGENT_KEY)
    assert out.returncode == 0, out.stderr
    assert _drawing(out.stdout) == [], ascii(out.stdout)
    assert json.loads(out.stdout)["observation"]["data"]["note"] == HOSTILE  # the same JSON


def _log_with_agent_text(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, gateway_id="g")
    log.record("policy", decision_id="d-1", code="ok", tool="echo",  # what `audit: full` records
               policy_input={"args": {"note": HOSTILE}, "run": {"evidence": {"ticket": "caf\u00e9"}}})
    log.close()
    return path


def test_audit_search_escapes_what_agents_wrote_into_the_log(tmp_path):
    path = _log_with_agent_text(tmp_path)
    for extra in ((), ("--steps",)):
        out = _cli("audit", "search", path, "--decision-id", "d-1", *extra)
        assert out.returncode == 0, out.stderr
        assert _drawing(out.stdout) == [], ascii(out.stdout)
        (record,) = [json.loads(line) for line in out.stdout.splitlines()]
        assert record["policy_input"]["args"]["note"] == HOSTILE
        assert "caf\u00e9" in out.stdout  # readable text stays as it is


def test_audit_search_prints_a_lone_surrogate_escaped_instead_of_crashing(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text('{"ts": 1, "seq": 1, "stage": "result", "tool": "echo", "note": "\\ud800"}\n')
    out = _cli("audit", "search", path, "--tool", "echo")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "\\ud800" in out.stdout and "1 of 1 records matched" in out.stderr


@pytest.mark.parametrize("line", [
    '{"ts": 1, "stage": "result", "steps": 5}',
    '{"ts": 1, "stage": "result", "steps": true}',
    "[" * 100_000,
], ids=["steps-number", "steps-bool", "deep"])
def test_audit_search_gets_past_a_malformed_record_without_a_traceback(tmp_path, line):
    path = tmp_path / "audit.jsonl"
    path.write_text(line + "\n" + '{"ts": 2, "stage": "result", "code": "policy_denied"}\n')
    out = _cli("audit", "search", path, "--code", "policy_denied", "--agent", "")
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 0 and json.loads(out.stdout.splitlines()[-1])["ts"] == 2, out.stdout


def test_audit_verify_escapes_file_names(tmp_path):
    """Whoever can make files where the log lives picks their names: a name holding ESC or a
    carriage return must not redraw the verdict line."""
    log = tmp_path / "audit.jsonl"
    AuditLog(log, gateway_id="t").close()
    odd = tmp_path / ("audit.jsonl" + "\x1b[2K\r" + HOSTILE)
    odd.write_bytes(log.read_bytes())
    out = _cli("audit", "verify", log, odd)
    assert out.stdout and not _drawing(out.stdout) and not _drawing(out.stderr), out
    assert "\\u001b[2K\\u000d" in out.stdout

