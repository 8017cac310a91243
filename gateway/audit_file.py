"""The audit log's file: whole lines appended, the head anchor beside it, and what a start finds.

``ChainedFile`` is what ``gateway.audit.AuditLog`` writes through: lines held until ``flush``,
then written whole; a write that fails part-way (a full disk) is cut back to the last whole line
and the chain set back with it (``ChainedFile._undo``). At start it continues the chain from the
last whole record, sets aside a torn last line or a log cut before its head (see
``gateway.audit``), and finishes a rotation a stop interrupted.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import time
from json import encoder as _json_encoder
from pathlib import Path
from typing import Any, Iterator

import structlog

from gateway.json_keys import NotStrictJson, strict_loads
from gateway.regular_files import open_regular

log = structlog.get_logger("toolgate.audit")

GENESIS = "sha256:" + "0" * 64
_BLOCK = 1 << 20  # bytes read at a time when reading the log backwards
_HEAD_WIDTH = 128  # bytes of the head file: its JSON padded with spaces (seq up to 20 digits fits)
_HEAD_MAX = 4096  # bytes read of a head file at the most: a larger one is no head


PRIVATE_DIR, PRIVATE_FILE = 0o750, 0o640
"""Modes for the folders and files the gateway makes: the audit log holds the arguments of write
tools, the store approvals' arguments and stored outcomes, so others may not read them; its group
may (a log shipper beside it). The umask narrows them further; a file that exists keeps its mode."""


def _append(path: Path) -> Any:
    """``path`` opened to append (made with ``PRIVATE_FILE``), unbuffered."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE), "ab", buffering=0)


class ChainedFile:
    """Appends lines to the log and keeps the head anchor beside it."""

    def __init__(self, path: Path, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync
        path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        self._lock_fd = lock_log(path)  # first: a second writer would set aside the first one's lines
        self._released = False
        """Whether ``close`` let go of the descriptors (once only)."""
        try:
            self._open(path)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open(self, path: Path) -> None:
        self.torn = _set_aside_torn_tail(path, self.fsync)
        """When the log ended in a partial line: where that line was moved, for a record."""
        self.set_aside = _set_aside_if_cut(path)
        """When the log ended before its head, or its head was not one: what was moved aside, for
        the first record."""
        self.seq, self.last_hash = _tail_state(path)
        self._file = _append(path)
        self._pending: list[bytes] = []
        """Lines not yet written: the file gets whole lines only, at ``flush``."""
        self._pending_bytes = 0
        self._size = self._file.seek(0, os.SEEK_END)
        self._written = (self._size, self.seq, self.last_hash)
        """The file's size and the chain's state after the last write that succeeded (``_undo``)."""
        self._broken: str = ""
        self._head = path.with_name(path.name + ".head")
        # Kept open and overwritten in place with one fixed-width pwrite (JSON padded with
        # spaces): a tmp file + rename per call cost ~0.3 ms, half the allow path's CPU.
        try:
            self._head_fd, head = open_regular(self._head, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE)  # a FIFO: refused
        except OSError:
            self._file.close()
            raise
        self._dirty = False
        if head.st_size == 0:  # a new head: where the chain stands, before any record
            self._write_head()  # (verify wants a head beside a non-empty log, even one a crash cut short)

    def size(self) -> int:
        return self._size + self._pending_bytes

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
            self._file = _append(self.path)
        self._size = self._file.seek(0, os.SEEK_END)
        self._written = (self._size, self.seq, self.last_hash)
        return target.name

    def msg(self, line: bytes) -> None:
        if self._broken:
            raise OSError(self._broken)
        self._pending.append(line + b"\n")
        self._pending_bytes += len(line) + 1
        self._dirty = True

    def flush(self, anchor: bool = True) -> None:
        if self._broken:
            raise OSError(self._broken)
        if self._pending:
            self._write_pending()
        if not anchor or not self._dirty:  # the head may lag the log (never lead it): verify accepts that
            return
        self._write_head()
        self._dirty = False

    def _write_pending(self) -> None:
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        try:
            done = self._file.write(data) or 0
            while done < len(data):  # a write may take part of it: the rest follows
                done += self._file.write(memoryview(data)[done:]) or 0
            if self.fsync:
                os.fsync(self._file.fileno())
        except OSError:
            self._undo()
            raise
        self._size += len(data)
        self._pending.clear()
        self._pending_bytes = 0
        self._written = (self._size, self.seq, self.last_hash)

    def _undo(self) -> None:
        """After a write that failed part-way (a full disk): the log cut back to its last whole
        line and the chain set back to it, so the next record follows that line, never a part of
        one; the records not written are the failing call's, whose write raises. When even the
        cut fails, every later record raises until a restart sets the torn line aside."""
        self._pending.clear()
        self._pending_bytes = 0
        size, self.seq, self.last_hash = self._written
        try:
            os.ftruncate(self._file.fileno(), size)
        except OSError as exc:
            self._broken = (f"the audit log {self.path} could not be cut back after a failed write ({exc}); "
                            "restart the gateway once the disk has room")
            log.error("audit_log_broken", path=str(self.path), error=str(exc))

    def _write_head(self) -> None:
        # what json.dumps({"seq": …, "hash": …}) writes, without building an encoder per call
        head = b'{"seq": %d, "hash": %s}' % (self.seq, _json_encoder.encode_basestring_ascii(self.last_hash).encode())
        head = head.ljust(_HEAD_WIDTH)
        os.pwrite(self._head_fd, head, 0)  # never shorter than before: the file never needs truncating

    def close(self) -> None:
        """Flush and close; a second close does nothing (closing the head's fd number twice
        could close another file that has reused it). The head and the lock are let go even
        when the log file is closed already (a rotation that could not open the new one)."""
        if self._released:
            return
        self._released = True
        try:
            if not self._file.closed:
                self.flush()
        finally:
            try:
                self._file.close()
            finally:
                os.close(self._head_fd)
                os.close(self._lock_fd)  # last: no other writer may start before the log is flushed


class AuditLogInUse(OSError):
    """Another process (or another log object in this one) already writes this audit log."""


def lock_log(path: Path) -> int:
    """A descriptor of ``<log>.lock`` holding an exclusive lock, released when it is closed or the
    process ends however it ends; ``AuditLogInUse`` when another holds it.

    One log, one writer: two gateways started on one data dir would each number their records
    from the same head, so the chain they write together verifies as broken, and each start
    would set aside the other's last line as torn. The lock file never rotates and holds only
    the pid of its holder, for this error's message."""
    fd, _ = open_regular(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, PRIVATE_FILE)  # a FIFO: refused
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise AuditLogInUse(
            f"the audit log {path} is in use by another gateway process{f' (pid {holder})' if holder.isdigit() else ''}; "
            "each gateway, and each of its workers, needs its own audit log: stop the other one, or give this one "
            "another data dir (TOOLGATE_DATA_DIR) or audit.path") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


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
            out = os.fdopen(os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE), "xb")
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
