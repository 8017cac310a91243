"""``toolgate serve`` stopping, and what it logs, with ``workers: 1`` and ``workers: N``.

Found by an operator review: each worker logged in structlog's console format on stdout (its
``audit_checkpoint`` announcement, which ``audit verify --expect-record`` takes, was no JSON on
stderr); a plain-``def`` python tool sleeping past a SIGTERM kept the process up until it
returned (the interpreter joins a ``ThreadPoolExecutor``'s threads at exit), its side effect
landing after the audit log had closed; the supervisor waited for its workers one after the
other, the whole timeout each; and a dead worker was one line of plain text on stdout.

Real ``toolgate serve`` processes on 127.0.0.1 port 0 with the SQLite store; the tool is a module
written into the test's folder and put on the gateway's ``PYTHONPATH``. A stop waits out the
server's grace (5 s, not configurable), so the stop tests take some 6 s each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest
import yaml

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.config import hash_api_key

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "stop-agent-key"
GRACE = 5.0
"""The calls' and tools' grace at a stop (``gateway.server.serve``)."""
MARGIN = 4.0
"""What a stop may take past the grace: the stopped tools' results, closing, the interpreter's exit."""

TOOLS = '''
import os
import time
from pathlib import Path


def sleep_sync(args, ctx):
    """A plain def, so it runs on the python executor's threads: marks its start and its end."""
    folder = Path(args["folder"])
    (folder / f"started.{os.getpid()}.{ctx.decision_id}").touch()
    time.sleep(float(args["seconds"]))
    (folder / f"ended.{os.getpid()}.{ctx.decision_id}").touch()
    return {"slept": args["seconds"]}
'''

STUCK_SUPERVISOR = '''
import signal
import sys
import time


def stuck(address, index, link):
    """A run_workers target that ignores SIGTERM: only the supervisor's kill ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    link.send(("ready", ""))
    time.sleep(120)


if __name__ == "__main__":
    from gateway import workers
    from gateway.cli.serve_cmd import configure_logging

    configure_logging()
    workers.STOP_TIMEOUT_SECONDS = float(sys.argv[2])
    ready = lambda address: print("ready", address, flush=True)
    sys.exit(workers.run_workers(int(sys.argv[1]), "127.0.0.1:0", stuck, ready=ready, name="stuck"))
'''


class Served:
    """A ``toolgate serve`` child whose stdout and stderr go to files (read whole, never blocking it)."""

    def __init__(self, root: Path, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        self.stdout, self.stderr = root / "stdout.txt", root / "stderr.txt"
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env={**os.environ, **(env or {})}, cwd=root)
        self.address = ""

    def wait_for_line(self, prefix: str, timeout: float = 60.0) -> str:
        return wait_for(lambda: next((x for x in self.stdout.read_text().splitlines() if x.startswith(prefix)), None),
                        timeout, f"{prefix!r} on stdout", self)

    def stop(self, limit: float) -> float:
        """SIGTERM; the seconds until the process is gone (killed, and the test failed, past ``limit`` + 5 s)."""
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(limit + 5)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"still running {limit + 5:g} s after SIGTERM (allowed: {limit:g} s)")
        return time.monotonic() - began

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log(self) -> list[dict[str, Any]]:
        """The stderr lines, each of which must be one JSON object."""
        lines = [x for x in self.stderr.read_text().splitlines() if x.strip()]
        not_json = [x for x in lines if not _json_object(x)]
        assert not not_json, f"stderr lines that are no JSON object: {not_json[:5]}"
        return [json.loads(x) for x in lines]


def _json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def wait_for(found: Callable[[], Any], timeout: float, what: str, served: Served) -> Any:
    """Poll ``found`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := found():
            return value
        if served.proc.poll() is not None:
            pytest.fail(f"the process exited ({served.proc.returncode}) before {what}: "
                        f"{served.stderr.read_text()[-2000:]}")
        time.sleep(0.05)
    pytest.fail(f"no {what} within {timeout:g} s")


def gateway(root: Path, *, workers: int, **extra: Any) -> Served:
    (root / "tools").mkdir()
    (root / "tools" / "stop_tools.py").write_text(TOOLS)
    raw = {"gateway_id": "stop", "workers": workers, "policy": {"bundle": str(ROOT / "rego")},
           "identities": [{"name": "agent", "api_key_sha256": hash_api_key(API_KEY), "tenant": "acme",
                           "roles": ["agent"]}],
           "tools": [{"name": "sleep_sync", "input_schema": {"type": "object"}, "risk": {"side_effect": "read"},
                      "executor": {"kind": "python", "callable": "stop_tools:sleep_sync"}, "timeout_seconds": 120}],
           **extra}
    (root / "toolgate.yaml").write_text(yaml.safe_dump(raw))
    path = os.pathsep.join(filter(None, [str(root / "tools"), os.environ.get("PYTHONPATH", "")]))
    served = Served(root, [sys.executable, "-m", "gateway.cli", "serve", "--config", str(root / "toolgate.yaml"),
                           "--host", "127.0.0.1", "--port", "0"],
                    env={"TOOLGATE_DATA_DIR": str(root / "data"), "PYTHONPATH": path})
    served.address = served.wait_for_line("toolgate listening on ").split()[-1]
    return served


def call_sleep(served: Served, root: Path, seconds: float, channels: int) -> tuple[list[grpc.Channel], list[Any]]:
    """``channels`` calls at once, one per channel (so one per connection: the kernel spreads those)."""
    opened = [grpc.insecure_channel(served.address, options=[("grpc.use_local_subchannel_pool", 1)])
              for _ in range(channels)]
    args = json.dumps({"seconds": seconds, "folder": str(root)}).encode()
    request = pb.ToolCallRequest(tool="sleep_sync", args_json=args)
    calls = [pb_grpc.ToolGatewayStub(c).ExecuteTool.future(request, metadata=(("x-api-key", API_KEY),), timeout=120)
             for c in opened]
    return opened, calls


def records(root: Path, pattern: str) -> list[dict[str, Any]]:
    return [json.loads(x) for f in sorted((root / "data").glob(pattern)) for x in f.read_text().splitlines()]


def verify(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "audit", "verify", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def started_pids(root: Path) -> set[str]:
    return {p.name.split(".")[1] for p in root.glob("started.*")}


def events(log: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in log if e["event"] == name]


def test_each_workers_log_lines_are_json_with_its_index(tmp_path):
    served = gateway(tmp_path, workers=2, audit={"signing_key": "audit-signing.pem", "checkpoint_seconds": 0.2})
    try:
        opened, calls = call_sleep(served, tmp_path, 0.01, channels=16)
        assert {c.result().code for c in calls} == {"ok"}
        for c in opened:
            c.close()
        wait_for(lambda: {e.get("worker") for e in events(served.log(), "audit_checkpoint")} == {0, 1}, 20,
                 "audit_checkpoint line on stderr from each worker", served)
        assert served.stop(GRACE + MARGIN) < GRACE + MARGIN and served.proc.returncode == 0
    finally:
        served.kill()
    log = served.log()
    checkpoints = events(log, "audit_checkpoint")
    for e in checkpoints:  # the index on the line is the worker whose chain it signed
        assert Path(e["path"]).name == f"audit.w{e['worker']}.jsonl", e
    for name in ("stopping", "stopped"):  # each worker's, and the supervisor's (no index)
        assert sorted(str(e.get("worker", "supervisor")) for e in events(log, name)) == ["0", "1", "supervisor"]
    data = tmp_path / "data"
    for worker in (0, 1):
        last = [e for e in checkpoints if e["worker"] == worker][-1]  # the one written at close
        out = verify(data / f"audit.w{worker}.jsonl", "--public-key", data / "audit-signing.pem.pub",
                     "--require-signed", "--expect-record", f"{last['seq']}:{last['hash']}")
        assert out.returncode == 0 and f"expected record seq {last['seq']}: held" in out.stdout, out.stdout + out.stderr


def test_a_worker_that_dies_is_logged_as_json_with_a_code(tmp_path):
    served = gateway(tmp_path, workers=2)
    try:
        children = subprocess.run(["pgrep", "-P", str(served.proc.pid)], capture_output=True, text=True).stdout.split()
        victim = next(int(p) for p in children
                      if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text(errors="replace"))
        os.kill(victim, signal.SIGKILL)
        assert served.proc.wait(30) == 1
    finally:
        served.kill()
    log = served.log()
    [exited] = events(log, "worker_exited")
    assert (exited["level"], exited["code"], exited["exit_code"]) == ("error", "worker_exited", -signal.SIGKILL)
    assert exited["index"] in (0, 1) and "worker" not in exited  # a supervisor's line: no worker wrote it
    assert [e["reason"] for e in events(log, "stopping") if "worker" not in e] == ["worker_exited"]
    assert "exited with code" not in served.stdout.read_text()


@pytest.mark.slow
def test_a_sync_tool_past_the_grace_does_not_hold_the_stop(tmp_path):
    served = gateway(tmp_path, workers=1)
    opened, calls = call_sleep(served, tmp_path, 60, channels=1)
    try:
        wait_for(lambda: started_pids(tmp_path), 20, "tool start", served)
        took = served.stop(GRACE + MARGIN)
    finally:
        served.kill()
        opened[0].close()
    assert took < GRACE + MARGIN and served.proc.returncode == 0, took
    assert not list(tmp_path.glob("ended.*"))  # nothing of the tool ran on past the audit log's close
    [result] = [r for r in records(tmp_path, "audit.jsonl") if r["stage"] == "result"]
    assert (result["code"], result["executed"]) == ("outcome_unknown", True)  # it started: it may have had its effect
    out = verify(tmp_path / "data" / "audit.jsonl")
    assert out.returncode == 0, out.stdout + out.stderr
    log = served.log()
    [stopping], [stopped] = events(log, "stopping"), events(log, "stopped")
    assert (stopping["reason"], stopping["in_flight"], "worker" in stopping) == ("SIGTERM", 1, False)
    assert stopped["seconds"] < GRACE + MARGIN


@pytest.mark.slow
def test_two_workers_with_slow_sync_calls_stop_within_one_grace(tmp_path):
    served = gateway(tmp_path, workers=2)
    opened, calls = call_sleep(served, tmp_path, 60, channels=16)
    try:
        wait_for(lambda: sum(r["stage"] == "authorized" for r in records(tmp_path, "audit.w*.jsonl")) == 16, 30,
                 "16 calls authorized", served)
        wait_for(lambda: len(started_pids(tmp_path)) == 2, 20, "a tool started on each worker", served)
        took = served.stop(GRACE + MARGIN)
    finally:
        served.kill()
        for c in opened:
            c.close()
    assert took < GRACE + MARGIN and served.proc.returncode == 0, took
    assert not list(tmp_path.glob("ended.*"))
    results = [r for r in records(tmp_path, "audit.w*.jsonl") if r["stage"] == "result"]
    assert [r["code"] for r in results] == ["outcome_unknown"] * 16  # every call has its result written
    for log in sorted((tmp_path / "data").glob("audit.w*.jsonl")):
        out = verify(log)
        assert out.returncode == 0, out.stdout + out.stderr
    assert [e.get("killed") for e in events(served.log(), "stopped") if "worker" not in e] == [[]]


def test_workers_stuck_past_sigterm_are_killed_at_one_deadline(tmp_path):
    """Four workers that ignore SIGTERM, a 1 s deadline: killed after 1 s in all, not 1 s each."""
    (tmp_path / "stuck_supervisor.py").write_text(STUCK_SUPERVISOR)
    served = Served(tmp_path, [sys.executable, str(tmp_path / "stuck_supervisor.py"), "4", "1.0"],
                    env={"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))})
    try:
        served.wait_for_line("ready ")
        took = served.stop(2.5)
    finally:
        served.kill()
    assert took < 2.5 and served.proc.returncode == 0, took
    log = served.log()
    killed = events(log, "worker_killed")
    assert sorted(e["index"] for e in killed) == [0, 1, 2, 3] and {e["code"] for e in killed} == {"worker_killed"}
    [stopped] = events(log, "stopped")
    assert stopped["killed"] == [0, 1, 2, 3]
