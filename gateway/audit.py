"""The tamper-evident audit log.

Append-only JSON lines. Each record carries ``seq`` (1, 2, ...),
``prev_hash`` (the previous record's hash; a zero hash for the first) and ``hash``: sha256
over the record's canonical form (sorted keys, compact, UTF-8) without ``hash``. A head file
beside the log (``<log>.head``) holds the last seq and hash, so removing whole records from
the end is detected too. ``verify_file`` (gateway.audit_verify) reports the first broken record.

Records never hold secrets; arguments appear only when the policy asked for ``audit: full``.
One writer per file: give each replica its own path. The file itself: ``gateway.audit_file``.

Rotation (``rotate_bytes``): once the log reaches that size, at the end of a call, the file
is renamed ``<log>.<seq of its last record, 12 digits>`` and a fresh ``<log>`` begins with an
``audit_rotated`` record that goes on with the chain (next seq, ``prev_hash`` = the last
record's hash) and names the file it follows. So each file verifies alone — a file may start
after seq 1 only with that record, a rotated one ends at the seq in its name — and consecutive
files verify together: a missing or emptied file in between is a gap in seq (verification:
``gateway.audit_verify``). A gateway that stopped between the rename and that first record
finishes the rotation when it starts again. A log that ends in a partial line (a stop or a full
disk mid-write) has that line moved to ``<log>.torn-<unix ns>`` at start, and an
``audit_restarted`` record with code ``audit_log_torn`` names it; a log that ends before its
head is moved to ``<log>.cut-<unix ns>`` (code ``audit_log_cut``; ``audit_head_unreadable`` when
its head is there but not one, which the next flush would overwrite). Evidence set aside is never
replaced: a name already taken gets ``-1``, ``-2``… after it.

Signed checkpoints (``signer``, ``audit.signing_key``): ``checkpoint`` appends an
``audit_checkpoint`` record signed over the chain before it (``gateway.audit_sign``).

Not through structlog (DESIGN.md says it is): a record is written on every stage of every
call, and structlog's bound-logger machinery (context copy, processor chain, proxy call)
cost ~8 µs of the ~18 µs a record took, with nothing in it the chain needs. Operational
logs still go through structlog; this file is a hash chain with its own writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import structlog

from gateway.audit_file import GENESIS, ChainedFile, read_head  # noqa: F401 (GENESIS, read_head: for readers of the format)
from gateway.json_encode import encoder

if TYPE_CHECKING:
    from gateway.audit_sign import CheckpointSigner

log = structlog.get_logger("toolgate.audit")

ROTATED = "audit_rotated"
RESTARTED = "audit_restarted"
CHECKPOINT = "audit_checkpoint"
"""A record signing the chain before it (``gateway.audit_sign``)."""


_canonical = encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
"""``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)``."""


def canonical(record: dict[str, Any]) -> bytes:
    """Sorted keys, compact, UTF-8: the form a record's hash is taken over."""
    return _canonical(record).encode()


def escaped(value: str, limit: int = 64) -> str:
    """The first ``limit`` characters of a caller's string with everything outside printable
    ASCII escaped (a backslash too, so the escaped form reads back unambiguously)."""
    return value[:limit].encode("unicode_escape").decode("ascii")


def caller_text(name: str, value: str) -> dict[str, Any]:
    """A string the caller chose, as audit fields safe to store: ``<name>_escaped`` (its first
    64 characters, everything outside printable ASCII escaped: no control, line-breaking or
    terminal character reaches a reader of the log), ``<name>_sha256`` (the whole value, UTF-8)
    and ``<name>_length``."""
    return {
        f"{name}_escaped": escaped(value),
        f"{name}_sha256": "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest(),
        f"{name}_length": len(value),
    }


def record_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


class AuditLog:
    """Write chained audit records. ``record`` is synchronous and cheap; ``flush`` once per call."""

    def __init__(self, path: str | Path, *, fsync: bool = False, gateway_id: str = "", rotate_bytes: int = 0,
                 signer: CheckpointSigner | None = None) -> None:
        self.path = Path(path)
        self._sink = ChainedFile(self.path, fsync)
        self._gateway_id = gateway_id
        self._rotate_bytes = rotate_bytes
        self._signer = signer
        self._signed_seq = 0
        """The seq of the last checkpoint written by this writer (0: none yet)."""
        try:
            self._start()
        except BaseException:  # the file holds its lock until closed (gateway.audit_file.lock_log)
            with contextlib.suppress(OSError):  # the start's own error is the one to tell
                self._sink.close()
            raise

    def _start(self) -> None:
        """The records a start owes: what it set aside, a rotation a stop cut short."""
        if self._sink.set_aside:  # records were removed from the log (or its head is not one): keep it, say so
            code = "audit_head_unreadable" if "head_problem" in self._sink.set_aside else "audit_log_cut"
            log.error(code, path=str(self.path), **self._sink.set_aside)
            self.record(RESTARTED, code=code, **self._sink.set_aside)
            self._sink.flush()
        elif self._sink.seq and self._sink.size() == 0:  # stopped between a rotation's rename and its record
            self._rotated(self.path.with_name(f"{self.path.name}.{self._sink.seq:012d}").name)
        if self._sink.torn:  # after the rotation record: a file after seq 1 starts with that one
            log.warning("audit_log_torn", path=str(self.path), **self._sink.torn)
            self.record(RESTARTED, code="audit_log_torn", **self._sink.torn)
            self._sink.flush()

    def record(self, stage: str, *, decision_id: str = "", code: str = "", **fields: Any) -> None:
        """Append one record: ``stage`` names the step, ``code`` its outcome."""
        self._append(stage, decision_id, code, fields, None)

    @property
    def signing(self) -> bool:
        """Whether this log writes signed checkpoints (``checkpoint``)."""
        return self._signer is not None

    def checkpoint(self) -> bool:
        """Sign the chain as it stands with a ``CHECKPOINT`` record (``gateway.audit_sign``) and
        flush it, when records were written since this writer's last one; False when there
        was nothing to sign, or no key."""
        signer = self._signer
        if signer is None or self._sink.seq == self._signed_seq:
            return False
        self._append(CHECKPOINT, "", "ok", {"kid": signer.kid}, signer.sign)
        self._signed_seq = self._sink.seq
        self._sink.flush(True)
        # a second copy of the anchor, off the log's own file: the operational log (stderr)
        log.info(CHECKPOINT, path=str(self.path), seq=self._sink.seq, hash=self._sink.last_hash, kid=signer.kid)
        return True

    def _append(self, stage: str, decision_id: str, code: str, fields: dict[str, Any],
                sign: Callable[[bytes], str] | None) -> None:
        sink = self._sink
        fields.pop("hash", None)
        seq = sink.seq + 1
        fields.update(
            stage=stage, ts=round(time.time(), 6), gateway=self._gateway_id, decision_id=decision_id, code=code,
            seq=seq, prev_hash=sink.last_hash,
        )
        if sign is not None:  # over the record without its signature and hash (audit_sign.signed_part)
            fields["signature"] = sign(canonical(fields))
        body = canonical(fields)  # == what record_hash hashes; serialised once, not twice
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        # "hash" goes last on the line; verify_file re-canonicalises, so key order on the line is free
        sink.msg(body[:-1] + b',"hash":"' + digest.encode() + b'"}')
        sink.seq, sink.last_hash = seq, digest  # the chain moves only once the line is written

    def flush(self, *, anchor: bool = True) -> None:
        """Hand buffered records to the OS (and fsync when configured); ``anchor=False``
        leaves the head file for the next flush (a write-ahead record mid-call)."""
        self._sink.flush(anchor)
        if anchor and self._rotate_bytes and self._sink.size() >= self._rotate_bytes:
            self.checkpoint()  # a rotated file ends signed
            try:
                name = self._sink.rotate()
            except OSError as exc:  # the records are written; this file just grows on
                log.warning("audit_rotation_failed", path=str(self.path), error=str(exc)[:300])
                return
            self._rotated(name)

    def _rotated(self, previous: str) -> None:
        self.record(ROTATED, code="ok", previous_file=previous)  # its seq - 1 and prev_hash: the last record there
        self._sink.flush()

    def close(self) -> None:
        """Sign what is unsigned (``checkpoint``), flush and close; a second close does nothing."""
        try:
            if not self._sink.closed:
                self.checkpoint()
        finally:
            self._sink.close()


def iter_steps(records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Each step of each call, with its call's ``decision_id``, ``tool`` and ``seq``.

    A call's steps travel in its records' ``steps`` lists (see gateway.pipeline); a record
    without steps (an approval event, a policy reload, a refused key, or a log written
    before calls were recorded this way) is yielded as it is.
    """
    for record in records:
        steps = record.get("steps")
        if not isinstance(steps, list):
            yield record
            continue
        shared = {k: record[k] for k in ("decision_id", "tool", "seq") if k in record}
        for step in steps:
            if isinstance(step, dict):
                yield {**shared, **step}

