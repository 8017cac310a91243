"""`toolgate demo` against a gateway over gRPC: the fake (with a scripted approver) and the real one."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from gateway.cli import build_parser
from gateway.cli.demo_cmd import EXIT_OK, EXIT_PAUSED, demo
from runtime_client.testing import serve_fake_gateway
from tests.approvals.approval_helpers import private_demo_keys

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "toolgate.yaml"


def _ns(address: str, tmp_path: Path, **kw) -> argparse.Namespace:
    argv = ["demo", "--target", address, "--api-key", "k", "--checkpoints", str(tmp_path / "cp.sqlite3")]
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return build_parser().parse_args(argv)


def test_demo_is_registered_and_reads_env(monkeypatch):
    monkeypatch.setenv("TOOLGATE_TARGET", "example:1")
    monkeypatch.setenv("TOOLGATE_API_KEY", "env-key")
    ns = build_parser().parse_args(["demo"])
    assert (ns.target, ns.api_key) == ("example:1", "env-key")


async def test_demo_end_to_end_with_an_approver(fake, tmp_path):
    def approver(event):  # stands in for `toolgate approvals approve` in another process
        if event.type == "requested":
            fake.approve(event.approval.approval_id)

    fake.subscribe("", approver)
    out = io.StringIO()
    async with serve_fake_gateway(fake, api_key="k") as address:
        code = await demo(_ns(address, tmp_path, approval_timeout=5), out)
    text = out.getvalue()
    assert code == EXIT_OK, text
    assert "lookup_policy refused" not in text and "delete_file refused: policy_denied" in text
    assert "context_built → decision → policy_decision → tool_result → context_built → decision → stop" in text
    assert text.count("eval: PASS") == 3
    assert len(fake.executions("write_file")) == 1 and fake.executions("delete_file") == []


async def test_demo_pauses_then_resumes_by_run_id(fake, tmp_path):
    out = io.StringIO()
    async with serve_fake_gateway(fake, api_key="k") as address:
        assert await demo(_ns(address, tmp_path, approval_timeout=0), out) == EXIT_PAUSED
        assert fake.executions("write_file") == []
        [approval] = fake.approvals("pending")
        run_id = next(l.split()[-1] for l in out.getvalue().splitlines() if "--resume" in l)
        fake.approve(approval.approval_id)
        out2 = io.StringIO()
        assert await demo(_ns(address, tmp_path, approval_timeout=0, resume=run_id), out2) == EXIT_OK
    assert len(fake.executions("write_file")) == 1
    assert "eval: PASS" in out2.getvalue()


async def test_demo_against_real_gateway_until_the_approval_pause(tmp_path):
    gateway_testing = pytest.importorskip("gateway.testing")
    running = await gateway_testing.start_gateway(DEMO_CONFIG, data_dir=tmp_path / "data")
    out = io.StringIO()
    try:
        ns = _ns(running.address, tmp_path, approval_timeout=0)
        ns.api_key = "demo-agent-key"
        code = await demo(ns, out)
    finally:
        await running.stop()
    text = out.getvalue()
    assert "delete_file refused: policy_denied" in text, text
    assert text.count("eval: PASS") == 2, text
    assert code == EXIT_PAUSED, text


async def test_demo_reports_unreachable_gateway(tmp_path):
    assert await demo(_ns("127.0.0.1:1", tmp_path, approval_timeout=0), io.StringIO()) == 6


async def test_demo_full_run_against_real_gateway_with_cli_approver(tmp_path):
    gateway_testing = pytest.importorskip("gateway.testing")
    data = tmp_path / "data"
    running = await gateway_testing.start_gateway(DEMO_CONFIG, data_dir=data)
    out = io.StringIO()
    try:
        ns = _ns(running.address, tmp_path, approval_timeout=30,
                 approver_key=private_demo_keys(tmp_path / "keys") / "alice.pem", approver_api_key="alice-approver-key")
        ns.api_key = "demo-agent-key"
        audit = running.app.config.audit_path
        ns.audit_log = str(audit)
        code = await demo(ns, out)
    finally:
        await running.stop()
    text = out.getvalue()
    assert code == EXIT_OK, text
    assert text.count("eval: PASS") == 3, text
    assert "chain intact" in text, text
