"""``toolgate audit verify --expect-record SEQ:HASH``: a log cut back to an earlier checkpoint (head
rewritten to match), or a rotated log whose active file was removed, still verifies, signed to its
end; what shows the cut is a later record known off the host: the checkpoint the gateway announced
on its operational log. The SEQ:HASH here is taken from that announcement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import structlog

from gateway.audit import CHECKPOINT, AuditLog
from gateway.audit_sign import load_signer, public_path


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def _signed_log(tmp_path: Path, n: int, **kwargs) -> tuple[Path, Path, list[str]]:
    """A log of ``n`` records, a checkpoint after every 3 and at close: (log, .pub, each checkpoint
    as the operational log announced it, SEQ:HASH)."""
    key = tmp_path / "audit-signing.pem"
    with structlog.testing.capture_logs() as logs:
        log = AuditLog(tmp_path / "audit.jsonl", gateway_id="test", signer=load_signer(key), **kwargs)
        for i in range(n):
            log.record("result", decision_id=f"d{i}", code="ok", n=i)
            log.flush()
            if (i + 1) % 3 == 0:
                log.checkpoint()
        log.close()
    announced = [f"{e['seq']}:{e['hash']}" for e in logs if e["event"] == CHECKPOINT]
    return tmp_path / "audit.jsonl", public_path(key), announced


def _cut_back_to_checkpoint(path: Path, which: int) -> None:
    """What someone who can write the files does: drop every record after the ``which``-th checkpoint
    and point the head at it. No key is needed: what is left was signed."""
    lines = path.read_text().splitlines(keepends=True)
    ends = [i for i, line in enumerate(lines) if json.loads(line)["stage"] == CHECKPOINT]
    keep = lines[: ends[which] + 1]
    last = json.loads(keep[-1])
    path.write_text("".join(keep))
    path.with_name(path.name + ".head").write_text(json.dumps({"seq": last["seq"], "hash": last["hash"]}).ljust(128))


def test_the_intact_log_holds_the_last_announced_checkpoint(tmp_path):
    log, pub, announced = _signed_log(tmp_path, 10)
    out = _cli("audit", "verify", log, "--public-key", pub, "--require-signed", "--expect-record", announced[-1])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"expected record seq {announced[-1].split(':')[0]}: held" in out.stdout


def test_a_log_cut_back_to_an_earlier_checkpoint_verifies_but_misses_the_announced_one(tmp_path):
    log, pub, announced = _signed_log(tmp_path, 10)
    _cut_back_to_checkpoint(log, 0)
    signed_only = _cli("audit", "verify", log, "--public-key", pub, "--require-signed")
    assert signed_only.returncode == 0, signed_only.stdout  # the limit of what the files alone can show
    out = _cli("audit", "verify", log, "--public-key", pub, "--require-signed", "--expect-record", announced[-1])
    assert out.returncode == 1, out.stdout + out.stderr
    assert "MISSING" in out.stdout and ": ok:" in out.stdout


def test_a_rotated_log_with_its_active_file_removed_misses_the_announced_checkpoint(tmp_path):
    log, pub, announced = _signed_log(tmp_path, 40, rotate_bytes=1500)
    rotated = sorted(tmp_path.glob("audit.jsonl.*[0-9]"))
    assert len(rotated) >= 2
    log.unlink()
    log.with_name(log.name + ".head").unlink()
    out = _cli("audit", "verify", *rotated, "--public-key", pub, "--require-signed", "--expect-record", announced[-1])
    assert out.returncode == 1 and "MISSING" in out.stdout, out.stdout + out.stderr


def test_a_record_of_another_chain_is_not_held(tmp_path):
    log, pub, announced = _signed_log(tmp_path, 4)
    seq = announced[-1].split(":")[0]
    out = _cli("audit", "verify", log, "--expect-record", f"{seq}:sha256:{'0' * 64}")
    assert out.returncode == 1 and "MISSING" in out.stdout, out.stdout


def test_an_expected_record_that_is_no_seq_and_hash_is_refused(tmp_path):
    log, _, _ = _signed_log(tmp_path, 4)
    for bad in ("42", "x:sha256:" + "0" * 64, "0:sha256:" + "0" * 64, "3:sha256:abc"):
        out = _cli("audit", "verify", log, "--expect-record", bad)
        assert out.returncode == 2 and "invalid_expected_record" in out.stderr, (bad, out.stdout, out.stderr)
