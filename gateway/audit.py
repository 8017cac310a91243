"""The tamper-evident audit log.

Append-only JSON lines. Each record carries ``seq`` (1, 2, ...),
``prev_hash`` (the previous record's hash; a zero hash for the first) and ``hash``: sha256
over the record's canonical form (sorted keys, compact, UTF-8) without ``hash``. A head file
beside the log (``<log>.head``) holds the last seq and hash, so removing whole records from
the end is detected too. ``verify_file`` (gateway.audit_verify) reports the first broken record.

Records never hold secrets; arguments appear only when the policy asked for ``audit: full``.
One writer per file: give each replica its own path.

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

import hashlib
import itertools
import json
import os
import time
from json import encoder as _json_encoder
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import structlog

from gateway.json_encode import encoder
from gateway.json_keys import NotStrictJson, strict_loads
from gateway.regular_files import open_regular

if TYPE_CHECKING:
    from gateway.audit_sign import CheckpointSigner

log = structlog.get_logger("toolgate.audit")

GENESIS = "sha256:" + "0" * 64
ROTATED = "audit_rotated"
RESTARTED = "audit_restarted"
CHECKPOINT = "audit_checkpoint"
"""A record signing the chain before it (``gateway.audit_sign``)."""
_BLOCK = 1 << 20  # bytes read at a time when reading the log backwards
_HEAD_WIDTH = 128  # bytes of the head file: its JSON padded with spaces (seq up to 20 digits fits)
_HEAD_MAX = 4096  # bytes read of a head file at the most: a larger one is no head


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


class _ChainedFile:
    """Appends lines to the log and keeps the head anchor beside it."""

    def __init__(self, path: Path, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync
        path.parent.mkdir(parents=True, exist_ok=True)
        self.torn = _set_aside_torn_tail(path, fsync)
        """When the log ended in a partial line: where that line was moved, for a record."""
        self.set_aside = _set_aside_if_cut(path)
        """When the log ended before its head, or its head was not one: what was moved aside, for
        the first record."""
        self.seq, self.last_hash = _tail_state(path)
        self._file = open(path, "ab", buffering=1024 * 1024)
        self._head = path.with_name(path.name + ".head")
        # Kept open and overwritten in place with one fixed-width pwrite (JSON padded with
        # spaces): a tmp file + rename per call cost ~0.3 ms, half the allow path's CPU.
        try:
            self._head_fd, head = open_regular(self._head, os.O_WRONLY | os.O_CREAT, 0o644)  # a FIFO: refused
        except OSError:
            self._file.close()
            raise
        self._dirty = False
        if head.st_size == 0:  # a new head: where the chain stands, before any record
            self._write_head()  # (verify wants a head beside a non-empty log, even one a crash cut short)

    def size(self) -> int:
        return self._file.tell()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def rotate(self) -> str:
        """Rename the log to ``<log>.<seq>`` and open a fresh one; the name it now has."""
        self.flush()
        self._file.close()
        target = self.path.with_name(f"{self.path.name}.{self.seq:012d}")
        try:
            if target.exists():
                raise FileExistsError(f"{target} exists")
            os.rename(self.path, target)
            if self.fsync:
                _fsync_dir(self.path.parent)
        finally:  # renamed or not, records go on into a file at the log's path; if it cannot be
            # opened, self._file stays closed and every later record raises: no tool runs unaudited
            self._file = open(self.path, "ab", buffering=1024 * 1024)
        return target.name

    def msg(self, line: bytes) -> None:
        self._file.write(line + b"\n")
        self._dirty = True

    def flush(self, anchor: bool = True) -> None:
        if not self._dirty:
            return
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        if not anchor:  # the head may lag the log (never lead it): verify accepts that
            return
        self._write_head()
        self._dirty = False

    def _write_head(self) -> None:
        # what json.dumps({"seq": …, "hash": …}) writes, without building an encoder per call
        head = b'{"seq": %d, "hash": %s}' % (self.seq, _json_encoder.encode_basestring_ascii(self.last_hash).encode())
        head = head.ljust(_HEAD_WIDTH)
        os.pwrite(self._head_fd, head, 0)  # never shorter than before: the file never needs truncating

    def close(self) -> None:
        """Flush and close; a second close does nothing (closing the head's fd number twice
        could close another file that has reused it)."""
        if self._file.closed:
            return
        try:
            self.flush()
        finally:
            self._file.close()
            os.close(self._head_fd)


class AuditLog:
    """Write chained audit records. ``record`` is synchronous and cheap; ``flush`` once per call."""

    def __init__(self, path: str | Path, *, fsync: bool = False, gateway_id: str = "", rotate_bytes: int = 0,
                 signer: CheckpointSigner | None = None) -> None:
        self.path = Path(path)
        self._sink = _ChainedFile(self.path, fsync)
        self._gateway_id = gateway_id
        self._rotate_bytes = rotate_bytes
        self._signer = signer
        self._signed_seq = 0
        """The seq of the last checkpoint written by this writer (0: none yet)."""
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


def _tail_state(path: Path) -> tuple[int, str]:
    """seq and hash of the last complete record, to continue the chain after a restart (for an
    empty log after a rotation's rename: the head's, when the renamed file is there)."""
    if not path.exists() or path.stat().st_size == 0:
        return _head_after_rename(path)
    for line in _lines_from_end(path):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and type(rec.get("seq")) is int and isinstance(rec.get("hash"), str):
            return rec["seq"], rec["hash"]
    return 0, GENESIS


def _lines_from_end(path: Path) -> Iterator[bytes]:
    """The lines of ``path``, the last first, split at ``\\n`` only (as verify reads them: a
    ``\\r`` inside a line is JSON whitespace), each whole however long it is."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        pending: list[bytes] = []  # the pieces read so far of the line being read, last piece first
        while end > 0:
            start = max(0, end - _BLOCK)
            f.seek(start)
            parts = f.read(end - start).split(b"\n")
            end = start
            pending.append(parts[-1])
            if len(parts) == 1:
                continue
            yield b"".join(reversed(pending))
            yield from reversed(parts[1:-1])
            pending = [parts[0]]
        yield b"".join(reversed(pending))


def _set_aside_if_cut(path: Path) -> dict[str, Any] | None:
    """A log that ends before its head lost records after they were written: cut short, emptied
    or deleted (the head never leads what was written, short of a power loss without
    ``audit.fsync``). Continuing its chain would overwrite the head and hide that, so both are
    renamed ``<log>.cut-<unix ns>`` (and ``.head``; ``-1``, ``-2``… after it if that is taken:
    never over earlier evidence) for an investigation, and the gateway starts a new chain whose
    first record names them. So is a log with records beside a head that is not one, or none
    (the head is written before the first record): the next flush would write it anew, and
    whether records were removed could no longer be told."""
    head_path = path.with_name(path.name + ".head")
    log_seq, _ = _tail_state(path)
    try:
        anchor = read_head(head_path)
    except OSError:  # unreadable: opening it to write fails next, and the gateway does not start
        return None
    except ValueError as exc:
        found: dict[str, Any] = {"head_problem": str(exc)}
    else:
        if anchor is None and log_seq > 0:  # written before the first record: gone since, or blanked
            found = {"head_problem": "missing or empty beside a log with records"}
        elif anchor is None or anchor[0] <= log_seq:
            return None
        else:
            found = {"head_seq": anchor[0]}
    for kept in _aside_names(path, "cut"):
        kept_head = kept.with_name(kept.name + ".head")
        if os.path.lexists(kept) or os.path.lexists(kept_head):
            continue
        if path.exists():
            _move_no_replace(path, kept)
        if os.path.lexists(head_path):
            _move_no_replace(head_path, kept_head)
        return {"previous_file": kept.name, "log_ended_at_seq": log_seq, **found}
    raise AssertionError("unreachable: _aside_names never ends")


def _aside_names(path: Path, kind: str) -> Iterator[Path]:
    """Names for evidence set aside from the log at ``path``: ``<log>.<kind>-<unix ns>``, then
    ``...-1``, ``...-2`` (the clock can give two starts the same reading): the caller takes the
    first that does not exist, so evidence is never replaced."""
    base = f"{path.name}.{kind}-{time.time_ns()}"
    yield path.with_name(base)
    for n in itertools.count(1):
        yield path.with_name(f"{base}-{n}")


def _move_no_replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, raising FileExistsError rather than replace a file there
    (``os.rename`` would): a hard link, which refuses an existing name, then unlink."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename (one writer per log)
        if os.path.lexists(target):
            raise FileExistsError(f"{target} exists") from None
        os.rename(source, target)
        return
    os.unlink(source)


def _set_aside_torn_tail(path: Path, fsync: bool) -> dict[str, Any] | None:
    """A log whose last line has no end holds a record a stop or a full disk cut mid-write. The
    head never names such a record (it is written after whole lines), so the partial line is
    moved to ``<log>.torn-<unix ns>`` (``-1``… when taken) and cut off: left in place, the next
    record would be glued onto it, unreadable, and ``audit verify`` would stop at that line for good."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    with open(path, "r+b") as f:
        end = size
        while end > 0:  # back to the last end of line
            start = max(0, end - _BLOCK)
            f.seek(start)
            block = f.read(end - start)
            if end == size and block.endswith(b"\n"):
                return None
            cut = block.rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        if end == size:  # an empty file
            return None
        f.seek(end)
        torn = f.read()
        kept = _write_aside(path, torn, fsync)
        f.truncate(end)
        if fsync:
            os.fsync(f.fileno())
    return {"torn_file": kept.name, "torn_bytes": len(torn), "torn_at_byte": end}


def _write_aside(path: Path, data: bytes, fsync: bool) -> Path:
    """Write ``data`` to a new ``<log>.torn-<unix ns>`` (``-1``, ``-2``… when taken: never over
    earlier evidence); its path."""
    for kept in _aside_names(path, "torn"):
        try:
            out = open(kept, "xb")
        except FileExistsError:
            continue
        with out:
            out.write(data)
            if fsync:
                os.fsync(out.fileno())
        return kept
    raise AssertionError("unreachable: _aside_names never ends")


def _head_bytes(head: Path) -> bytes:
    """The head file's bytes: opened without waiting (a FIFO put in its place would hang the
    read) and read only when a regular file, at most ``_HEAD_MAX`` bytes of it."""
    fd, _ = open_regular(head, os.O_RDONLY)
    try:
        raw = os.read(fd, _HEAD_MAX + 1)
    finally:
        os.close(fd)
    if len(raw) > _HEAD_MAX:
        raise ValueError(f"longer than a head ({_HEAD_MAX} bytes at most)")
    return raw


def read_head(head: Path) -> tuple[int, str] | None:
    """(seq, hash) from a head file, or None when there is none (missing or empty: not written
    yet). One that is there but is not ``{"seq": <integer ≥ 0>, "hash": <string>}``, each key
    once, raises ValueError; one that cannot be read, OSError."""
    try:
        raw = _head_bytes(head)
    except FileNotFoundError:
        return None
    if not raw.strip():
        return None
    try:
        anchor = strict_loads(raw)
    except NotStrictJson:
        raise ValueError("not valid JSON (each key once)") from None
    if (not isinstance(anchor, dict) or type(anchor.get("seq")) is not int or anchor["seq"] < 0
            or not isinstance(anchor.get("hash"), str)):
        raise ValueError('not {"seq": <integer>, "hash": <string>}')
    return anchor["seq"], anchor["hash"]


def _head_after_rename(path: Path) -> tuple[int, str]:
    try:
        anchor = read_head(path.with_name(path.name + ".head"))
    except (OSError, ValueError):  # a head that is not one was set aside before this is asked
        return 0, GENESIS
    if anchor is None:
        return 0, GENESIS
    seq, digest = anchor
    if seq > 0 and path.with_name(f"{path.name}.{seq:012d}").exists():
        return seq, digest
    return 0, GENESIS


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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

