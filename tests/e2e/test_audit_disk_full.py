"""A record the disk has no room for (a real EFBIG: the file size limit set below the log's size,
in a child process) fails its write and leaves the log as it was: the bytes of it that reached
the file are cut back, the next record takes its place in the chain, and the whole log verifies.
Before, a record larger than the writer's buffer left part of itself in the file and the next
record was glued to it: one unreadable line, every record after it unverified."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gateway.audit_verify import verify_file

_CHILD = """
import json, resource, signal, sys
from pathlib import Path
from gateway.audit import AuditLog

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of the process dying
path = Path(sys.argv[1])
log = AuditLog(path, gateway_id="g")
out = {}
def write(name, **fields):
    try:
        log.record("result", decision_id=name, code="ok", **fields)
        log.flush()
        out[name] = "written"
    except OSError as exc:
        out[name] = f"OSError {exc.errno}"
for name in ("d0", "d1", "d2"):
    write(name)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + int(sys.argv[2]), hard))
write("d3", policy_input={"args": {"content": "y" * int(sys.argv[3])}})
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
write("d4")
write("d5")
log.close()
print(json.dumps(out))
"""


def _run(tmp_path: Path, room: int, size: int) -> dict[str, str]:
    log = tmp_path / "audit.jsonl"
    done = subprocess.run([sys.executable, "-c", _CHILD, str(log), str(room), str(size)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _decisions(log: Path) -> list[tuple[int, str]]:
    return [(r["seq"], r.get("decision_id", "")) for r in map(json.loads, log.read_text().splitlines())]


def test_a_record_larger_than_the_room_left_is_cut_back_and_the_chain_goes_on(tmp_path: Path) -> None:
    out = _run(tmp_path, room=100, size=1_200_000)  # larger than any write buffer: part of it reaches the file
    assert out == {"d0": "written", "d1": "written", "d2": "written", "d3": "OSError 27",
                   "d4": "written", "d5": "written"}
    log = tmp_path / "audit.jsonl"
    assert _decisions(log)[:5] == [(1, "d0"), (2, "d1"), (3, "d2"), (4, "d4"), (5, "d5")]
    report = verify_file(log)
    assert report.ok, report


def test_a_small_record_with_no_room_fails_alone(tmp_path: Path) -> None:
    out = _run(tmp_path, room=10, size=200)
    assert out["d3"] == "OSError 27" and out["d4"] == out["d5"] == "written"
    report = verify_file(tmp_path / "audit.jsonl")
    assert report.ok, report
