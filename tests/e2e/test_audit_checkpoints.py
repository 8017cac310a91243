"""Signed audit checkpoints (``audit.signing_key``) against someone who can rewrite the log but
does not hold the key: a log edited and re-hashed whole verifies as a chain, and fails once its
checkpoints are checked with the public key; dropping them leaves an unsigned log that
``--require-signed`` refuses. Forged, moved and malformed checkpoints break the log; the key
file is held to the grant key's rules."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.audit import CHECKPOINT, AuditLog, canonical, record_hash
from gateway.audit_sign import CheckpointSigner, load_signer, public_path, read_public_keys, signed_part
from gateway.audit_verify import verify_file, verify_segments
from gateway.testing import GatewayProcess, start_gateway
from tests.conftest import Client, audit_records, demo_config


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def _signed_log(tmp_path: Path, n: int = 6, every: int = 2, **kwargs: Any) -> tuple[Path, Path]:
    """A log of ``n`` records with a checkpoint after every ``every`` of them and at close; (log, .pub)."""
    key = tmp_path / "audit-signing.pem"
    log = AuditLog(tmp_path / "audit.jsonl", gateway_id="test", signer=load_signer(key), **kwargs)
    for i in range(n):
        log.record("result", decision_id=f"d{i}", code="ok", n=i)
        log.flush()
        if (i + 1) % every == 0:
            assert log.checkpoint()
    log.close()
    return tmp_path / "audit.jsonl", public_path(key)


def _rewrite(path: Path, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
             resign: CheckpointSigner | None = None) -> None:
    """What someone who can write the files but holds no key can do: change the records, then
    renumber, re-hash the whole chain and rewrite the head to match (``resign``: sign every
    checkpoint again with a key of their own, keeping its kid)."""
    records = edit(audit_records(path))
    prev = "sha256:" + "0" * 64
    lines = []
    for seq, rec in enumerate(records, start=1):
        rec = {k: v for k, v in rec.items() if k != "hash"} | {"seq": seq, "prev_hash": prev}
        if resign is not None and rec["stage"] == CHECKPOINT:
            rec["signature"] = resign.sign(canonical(signed_part(rec)))
        rec["hash"] = prev = record_hash(rec)
        lines.append(json.dumps(rec) + "\n")
    path.write_text("".join(lines))
    path.with_name(path.name + ".head").write_text(json.dumps({"seq": len(records), "hash": prev}).ljust(128))


def _checkpoints(path: Path) -> list[dict[str, Any]]:
    return [r for r in audit_records(path) if r["stage"] == CHECKPOINT]


def test_checkpoints_sign_the_chain_and_verify_with_the_public_key(tmp_path):
    log, pub = _signed_log(tmp_path)
    marks = _checkpoints(log)
    assert [r["seq"] for r in marks] == [3, 6, 9]  # after every two records; the close found nothing new
    report = verify_file(log, read_public_keys([str(pub)]))
    assert report.ok and report.checkpoints == 3 and report.signed_seq == report.last_seq == 9, report
    out = _cli("audit", "verify", log, "--public-key", pub, "--require-signed")
    assert out.returncode == 0, out
    assert "3 signed checkpoint(s) verified, the last at seq 9, nothing after it" in out.stdout


def test_a_log_rewritten_whole_passes_as_a_chain_and_fails_its_signatures(tmp_path):
    log, pub = _signed_log(tmp_path)

    def lie(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        records[0]["code"] = "policy_denied"  # before every checkpoint
        return records

    _rewrite(log, lie)
    assert verify_file(log).ok  # the hash chain alone cannot tell: every hash was recomputed
    out = _cli("audit", "verify", log, "--public-key", pub)
    assert out.returncode == 1
    assert "BROKEN at line 3: the checkpoint's signature does not verify" in out.stdout, out.stdout


def test_a_log_rewritten_without_its_checkpoints_is_unsigned_and_refused_when_signing_is_required(tmp_path):
    log, pub = _signed_log(tmp_path)
    _rewrite(log, lambda records: [r for r in records if r["stage"] != CHECKPOINT])
    keys = read_public_keys([str(pub)])
    report = verify_file(log, keys)
    assert report.ok and report.checkpoints == 0 and report.signed_seq == 0
    shown = _cli("audit", "verify", log, "--public-key", pub)
    assert shown.returncode == 0 and "no signed checkpoint: nothing in it is signed" in shown.stdout
    required = _cli("audit", "verify", log, "--public-key", pub, "--require-signed")
    assert required.returncode == 1
    assert "BROKEN: no signed checkpoint, and --require-signed was given" in required.stdout, required.stdout


def test_records_added_after_the_last_checkpoint_are_an_unsigned_tail(tmp_path):
    log, pub = _signed_log(tmp_path)
    _rewrite(log, lambda records: records + [dict(records[0], decision_id="forged")])
    out = _cli("audit", "verify", log, "--public-key", pub)
    assert out.returncode == 0 and "the last at seq 9, 1 record(s) after it unsigned" in out.stdout, out.stdout
    required = _cli("audit", "verify", log, "--public-key", pub, "--require-signed")
    assert required.returncode == 1 and "records after the last signed checkpoint (seq 9)" in required.stdout


@pytest.mark.parametrize("change", ["ts", "seq moved", "other gateway", "signature", "bad base64", "no signature",
                                    "signature not a string", "kid unknown"])
def test_a_changed_checkpoint_breaks_the_log(tmp_path, change):
    log, pub = _signed_log(tmp_path)

    def edit(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        mark = records[2]
        assert mark["stage"] == CHECKPOINT
        if change == "ts":
            mark["ts"] += 3600
        elif change == "seq moved":  # the checkpoint moved one record later: it signed another seq and prev_hash
            records[2], records[3] = records[3], records[2]
        elif change == "other gateway":
            mark["gateway"] = "elsewhere"
        elif change == "signature":
            raw = bytearray(base64.urlsafe_b64decode(mark["signature"] + "=="))
            raw[0] ^= 1
            mark["signature"] = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
        elif change == "bad base64":
            mark["signature"] = "!!not base64!!"
        elif change == "no signature":
            del mark["signature"]
        elif change == "signature not a string":
            mark["signature"] = 7
        elif change == "kid unknown":
            mark["kid"] = "audit-0000000000000000"
        return records

    _rewrite(log, edit)
    report = verify_file(log, read_public_keys([str(pub)]))
    assert not report.ok and report.line in (3, 4), report
    assert "checkpoint" in report.reason, report


def test_a_checkpoint_forged_with_another_key_under_the_real_kid_breaks_the_log(tmp_path):
    log, pub = _signed_log(tmp_path)
    forger = CheckpointSigner(Ed25519PrivateKey.generate())

    def forge(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        records[0]["code"] = "policy_denied"
        return records

    _rewrite(log, forge, resign=forger)
    assert len(_checkpoints(log)) == 3 and verify_file(log).ok  # a consistent chain, its checkpoints re-signed
    report = verify_file(log, read_public_keys([str(pub)]))
    assert not report.ok and "does not verify" in report.reason, report
    # ...and verifying with the forger's own public key is refused too: its kid names no key given
    other = tmp_path / "forger.pub"
    other.write_bytes(forger.key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    report = verify_file(log, read_public_keys([str(other)]))
    assert not report.ok and "none of the public keys given" in report.reason, report


def test_each_rotated_file_ends_signed(tmp_path):
    key = tmp_path / "k.pem"
    log = AuditLog(tmp_path / "audit.jsonl", gateway_id="test", signer=load_signer(key), rotate_bytes=1500)
    for i in range(40):
        log.record("result", decision_id=f"d{i}", code="ok", n=i)
        log.flush()
    log.close()
    files = sorted(tmp_path.glob("audit.jsonl.*[0-9]")) + [tmp_path / "audit.jsonl"]
    assert len(files) >= 4
    keys = read_public_keys([str(public_path(key))])
    for path, report in verify_segments(files, keys):
        assert report.ok and report.signed_seq == report.last_seq, (path, report)
    out = _cli("audit", "verify", *files, "--public-key", public_path(key), "--require-signed")
    assert out.returncode == 0 and out.stdout.count(": ok:") == len(files), out


def test_nothing_new_is_not_signed_again_and_a_log_without_a_key_writes_no_checkpoint(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", gateway_id="test", signer=load_signer(tmp_path / "k.pem"))
    log.record("result", code="ok")
    assert log.checkpoint() and not log.checkpoint()
    log.close()
    assert [r["stage"] for r in audit_records(tmp_path / "audit.jsonl")] == ["result", CHECKPOINT]
    plain = AuditLog(tmp_path / "plain.jsonl", gateway_id="test")
    plain.record("result", code="ok")
    assert not plain.checkpoint() and not plain.signing
    plain.close()
    assert [r["stage"] for r in audit_records(tmp_path / "plain.jsonl")] == ["result"]


def test_each_checkpoint_is_also_in_the_operational_log(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", gateway_id="test", signer=load_signer(tmp_path / "k.pem"))
    log.record("result", code="ok")
    with structlog.testing.capture_logs() as logs:
        assert log.checkpoint()
    log.close()
    mark = _checkpoints(tmp_path / "audit.jsonl")[0]
    assert [(e["event"], e["seq"], e["hash"], e["kid"]) for e in logs] == [(CHECKPOINT, 2, mark["hash"], mark["kid"])]


def test_an_empty_new_log_has_nothing_to_sign(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", gateway_id="test", signer=load_signer(tmp_path / "k.pem"))
    assert not log.checkpoint()
    log.close()
    assert (tmp_path / "audit.jsonl").read_bytes() == b""


# --- the key file -----------------------------------------------------------------------------


def test_a_missing_key_is_made_private_with_its_public_half_beside_it(tmp_path):
    key = tmp_path / "keys" / "audit.pem"
    (tmp_path / "keys").mkdir()
    public_path(key).write_text("a stale public key of some earlier file\n")
    signer = load_signer(key)
    assert key.stat().st_mode & 0o777 == 0o600
    assert public_path(key).stat().st_mode & 0o777 == 0o644
    assert list(read_public_keys([str(public_path(key))])) == [signer.kid]  # the stale .pub was replaced
    again = load_signer(key)  # an existing key is read, never replaced
    assert again.kid == signer.kid


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_a_key_others_may_read_is_refused(tmp_path):
    key = tmp_path / "k.pem"
    load_signer(key)
    key.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        load_signer(key)


@pytest.mark.parametrize("content", [b"not a key", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"])
def test_a_key_file_that_is_no_key_is_refused(tmp_path, content):
    key = tmp_path / "k.pem"
    key.write_bytes(content)
    key.chmod(0o600)
    with pytest.raises(ValueError, match="audit signing key"):
        load_signer(key)


def test_public_keys_that_are_not_one_are_refused_by_verify(tmp_path):
    log, pub = _signed_log(tmp_path)
    private = tmp_path / "audit-signing.pem"
    fifo = tmp_path / "fifo.pub"
    os.mkfifo(fifo)  # read whole, it would hang verify
    big = tmp_path / "big.pub"
    big.write_bytes(b"x" * (2 << 20))
    for given, words in ((private, "not a PEM public key"), (tmp_path / "absent.pub", "No such file"),
                         (fifo, "not a regular file"), (tmp_path, "not a regular file"), (big, "so no public key")):
        out = _cli("audit", "verify", log, "--public-key", given)
        assert out.returncode == 2 and "invalid_public_key" in out.stderr and words in out.stderr, out
    out = _cli("audit", "verify", log, "--require-signed")
    assert out.returncode == 2 and "public_key_required" in out.stderr


def test_keys_audit_makes_a_key_pair_and_never_overwrites(tmp_path):
    out = _cli("keys", "audit", "--out", tmp_path / "a.pem")
    assert out.returncode == 0, out
    assert (tmp_path / "a.pem").stat().st_mode & 0o777 == 0o600
    signer = load_signer(tmp_path / "a.pem")
    assert list(read_public_keys([str(tmp_path / "a.pem.pub")])) == [signer.kid]
    again = _cli("keys", "audit", "--out", tmp_path / "a.pem")
    assert again.returncode == 2 and "key_file_exists" in again.stderr
    (tmp_path / "b.pem.pub").write_text("x")
    half = _cli("keys", "audit", "--out", tmp_path / "b.pem")
    assert half.returncode == 2 and "key_file_exists" in half.stderr and not (tmp_path / "b.pem").exists()


# --- a real gateway -----------------------------------------------------------------------------


async def test_a_gateway_signs_while_serving_and_at_stop(tmp_path):
    config = demo_config(tmp_path, audit={"signing_key": "audit-signing.pem", "checkpoint_seconds": 0.2})
    running = await start_gateway(config)
    client = Client(running.address)
    try:
        assert (await client.call("lookup_policy", '{"topic": "refunds"}')).code == "ok"
        for _ in range(100):  # the timer signs what the call wrote
            if _checkpoints(config.audit_path):
                break
            await asyncio.sleep(0.05)
        first = _checkpoints(config.audit_path)
        assert first and first[0]["seq"] == len(audit_records(config.audit_path))
        await asyncio.sleep(0.5)  # nothing new: no more checkpoints
        assert _checkpoints(config.audit_path) == first
        assert (await client.call("lookup_policy", '{"topic": "refunds"}')).code == "ok"
    finally:
        await client.close()
        await running.stop()
    records = audit_records(config.audit_path)
    assert records[-1]["stage"] == CHECKPOINT  # the stop signed the last call's records
    pub = public_path(config.data_path / "audit-signing.pem")
    out = _cli("audit", "verify", config.audit_path, "--public-key", pub, "--require-signed")
    assert out.returncode == 0, out


async def test_a_gateway_whose_key_others_may_read_does_not_start(tmp_path):
    config = demo_config(tmp_path, audit={"signing_key": str(tmp_path / "k.pem")})
    load_signer(tmp_path / "k.pem")
    (tmp_path / "k.pem").chmod(0o644)
    with pytest.raises(ValueError, match="audit signing key .*chmod 600"):
        await start_gateway(config)
    assert not config.audit_path.exists()  # refused before the log was opened


def test_serve_names_the_public_key_and_logs_each_checkpoint_on_its_operational_log(tmp_path):
    from tests.e2e.test_workers import TOOLS_DIR, call_on_channels, write_config

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH", "")]))}
    given = tmp_path / "given.pem"  # a key provisioned without its .pub
    given.write_bytes(CheckpointSigner(Ed25519PrivateKey.generate()).key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    given.chmod(0o600)
    for key, says in (("audit-signing.pem", "verify: toolgate audit verify --public-key"),
                      (str(given), "openssl pkey -in")):
        root = tmp_path / Path(key).stem
        root.mkdir()
        config = write_config(root, workers=1, audit={"signing_key": key})
        gw = GatewayProcess(config, data_dir=root / "data", env=env).start(60.0)
        try:
            assert {a.code for a in asyncio.run(call_on_channels(gw.address, "signed"))} == {"ok"}
        finally:
            gw.stop()
        log = root / "data" / "audit.jsonl"
        mark = _checkpoints(log)[-1]
        lines = [json.loads(x) for x in gw.output if x.startswith("{")]
        logged = [e for e in lines if e.get("event") == CHECKPOINT]
        assert [(e["seq"], e["hash"]) for e in logged] == [(mark["seq"], mark["hash"])], gw.output
        assert any(x.startswith("audit checkpoints signed every 60 s") and says in x for x in gw.output), gw.output
