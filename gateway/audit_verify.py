"""Verifying audit logs (the format and the writer: ``gateway.audit``).

``verify_file`` checks one file and reports the first thing wrong — the line and why — and
never raises on what it reads: a malformed line, a string that is not Unicode, a key twice on
one line or a head file of the wrong shape is a broken report like an edited record.

- Every record: a JSON object, each key once, an integer ``seq`` one more than the record
  before, ``prev_hash`` that record's ``hash``, ``hash`` its own. A file may start after seq 1
  only with an ``audit_rotated`` record.
- A rotated file ``<log>.<12 digits>`` ends at the seq its name says (so an emptied one is
  broken); the next file is checked against it by ``verify_segments``.
- The active log's head ``<log>.head`` (written since the first version of the log) names the
  last seq and hash: the log may run ahead of it (records of a call in flight), never behind,
  and its record at that seq has that hash.
  A non-empty log without a head is broken. An empty log is fine when it is new (no head, or
  a head at seq 0, and no rotated files beside it) or when a rotation was cut short by a stop
  (its head is the newest rotated file's last record; the gateway finishes it at start).
  So a log never rotated, emptied and its head deleted, looks new: nothing beside it says
  otherwise (ship the log off the host to cover that).

``verify_segments`` also checks that the files of one log given together go on from each
other: each non-empty file from the last non-empty one before it, without a gap in seq and
with the same hash on both sides.

Checkpoints (``audit_checkpoint``, ``gateway.audit_sign``) are counted; with public keys
given, each one's signature must verify with the key its ``kid`` names among them (one that
does not, or names no key given, breaks the file). What follows the last checkpoint is signed
by nothing: the report's ``signed_seq`` says where that tail begins.

``companion_reason`` tells the files the writer keeps beside a log (``audit.jsonl*`` matches
them too) from its segments, by name: a head (checked with its log), a log cut short and set
aside (``.cut-<ns>``, with its ``.head``) and a partial line set aside (``.torn-<ns>``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from json import JSONDecoder
from pathlib import Path
from typing import Any, Iterable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway.audit import CHECKPOINT, GENESIS, ROTATED, canonical, read_head, record_hash
from gateway.audit_sign import signature_problem, signed_part
from gateway.json_keys import DuplicateKey, unique_pairs


@dataclass(frozen=True, slots=True)
class VerifyReport:
    ok: bool
    records: int
    line: int = 0
    """The broken line (for a problem with the head file or a file as a whole: its end, or 0)."""
    reason: str = ""
    first_seq: int = 0
    """1, or where a rotated log's successor goes on (0: no records)."""
    last_seq: int = 0
    first_prev_hash: str = ""
    last_hash: str = ""
    note: str = ""
    """Something an intact log's reader should know (a rotation not finished yet)."""
    checkpoints: int = 0
    """``audit_checkpoint`` records read (their signatures checked when keys were given)."""
    signed_seq: int = 0
    """The seq of the last checkpoint (0: none): the records up to it are signed."""


Keys = dict[str, Ed25519PublicKey]
"""kid -> the public key checkpoints signed with that kid must verify with."""
_decode = JSONDecoder(object_pairs_hook=unique_pairs).decode


def _loads(raw: bytes) -> Any:
    """JSON with each key at most once per object (the stdlib keeps the last value of a key
    given twice; a reader that keeps the first would see another record)."""
    return _decode(raw.decode())


def _parse(raw: bytes) -> tuple[dict[str, Any], str, str]:
    """(record, its computed hash, "") or ({}, "", what is wrong with the line)."""
    if not raw.endswith(b"\n"):
        return {}, "", "truncated record (no end of line)"
    try:
        rec = _loads(raw)
    except DuplicateKey as exc:
        return {}, "", f"key {exc.key!r} appears twice: readers could disagree on its value"
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return {}, "", "not valid JSON"
    if not isinstance(rec, dict) or "hash" not in rec or "seq" not in rec:
        return {}, "", "not an audit record (no seq/hash)"
    if type(rec["seq"]) is not int or not isinstance(rec["hash"], str) or not isinstance(rec.get("prev_hash"), str):
        return {}, "", "not an audit record (seq must be an integer, prev_hash and hash strings)"
    try:
        digest = record_hash(rec)
    except (ValueError, RecursionError):  # UnicodeEncodeError: "\ud800" decodes but is no Unicode text
        return {}, "", "a string in the record is not Unicode text (a lone surrogate escape)"
    return rec, digest, ""


def _read_chain(path: Path, keys: Keys | None) -> VerifyReport:
    prev_hash, seq, count = GENESIS, 0, 0
    first_seq, first_prev = 0, GENESIS
    checkpoints, signed_seq = 0, 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            rec, digest, problem = _parse(raw)
            if problem:
                return VerifyReport(False, count, lineno, problem)
            if count == 0 and rec.get("stage") == ROTATED and rec["seq"] > 1:
                seq, prev_hash = rec["seq"] - 1, rec["prev_hash"]  # goes on from the file before
            if count == 0:
                first_seq, first_prev = seq + 1, prev_hash
            if rec["seq"] != seq + 1:
                return VerifyReport(False, count, lineno,
                                    f"seq {rec['seq']} follows {seq}: a record is missing or out of order")
            if rec["prev_hash"] != prev_hash:
                return VerifyReport(False, count, lineno, "prev_hash does not match the previous record")
            if digest != rec["hash"]:
                return VerifyReport(False, count, lineno, "hash does not match the record's content: edited")
            if rec.get("stage") == CHECKPOINT:
                if keys is not None and (problem := signature_problem(rec, canonical(signed_part(rec)), keys)):
                    return VerifyReport(False, count, lineno, problem)
                checkpoints, signed_seq = checkpoints + 1, rec["seq"]
            prev_hash, seq, count = rec["hash"], rec["seq"], count + 1
    return VerifyReport(True, count, first_seq=first_seq, last_seq=seq, first_prev_hash=first_prev, last_hash=prev_hash,
                        checkpoints=checkpoints, signed_seq=signed_seq)


def verify_file(path: str | Path, keys: Keys | None = None) -> VerifyReport:
    """Check one file (module docstring); the report names the first broken line and why.
    Whether a rotated log's file goes on from the file before it is ``verify_segments``' to check.
    With ``keys`` (kid -> public key) every checkpoint's signature must verify with one of them."""
    path = Path(path)
    try:
        chain = _read_chain(path, keys)
        if not chain.ok:
            return chain
        _, number = _segment_of(path)
        return _check_head(path, chain) if number == _ACTIVE else _check_name(chain, number)
    except OSError as exc:  # the log, or its folder when looking for rotated files
        return VerifyReport(False, 0, 0, f"cannot be read: {exc.strerror or exc}")


def _broken(chain: VerifyReport, line: int, reason: str) -> VerifyReport:
    return VerifyReport(False, chain.records, line, reason)


def _check_name(chain: VerifyReport, number: int) -> VerifyReport:
    """A rotated file ends at the seq in its name."""
    if not chain.records:
        return _broken(chain, 1, f"empty, but its name says it ends at seq {number}: its records were removed")
    if chain.last_seq != number:
        return _broken(chain, chain.records + 1, f"ends at seq {chain.last_seq}, but its name says seq {number}: "
                       "records were removed from its end, or it was renamed")
    return chain


def _check_head(path: Path, chain: VerifyReport) -> VerifyReport:
    head = path.with_name(path.name + ".head")
    try:
        anchor = _read_head(head)
    except (OSError, ValueError) as exc:
        return _broken(chain, 0, f"head file {head.name}: {exc}")
    if not chain.records:
        return _check_empty(path, head, anchor, chain)
    if anchor is None:
        return _broken(chain, 0, f"no head file ({head.name} is missing or empty): "
                       "whether records were removed from the end cannot be checked")
    seq, digest = anchor
    if seq > chain.last_seq:
        return _broken(chain, chain.records + 1, f"log ends at seq {chain.last_seq} but the head says {seq}: truncated")
    if seq == chain.last_seq and digest != chain.last_hash:
        return _broken(chain, chain.records, f"the last record (seq {seq}) is not the one the head names: replaced")
    if seq < chain.first_seq - 1:
        return _broken(chain, 0, f"the head says seq {seq}, before this log begins (seq {chain.first_seq})")
    if seq < chain.last_seq and _hash_at(path, seq, chain) != digest:  # ahead of the head: still its record there
        return _broken(chain, max(1, seq - chain.first_seq + 1),
                       f"the record at seq {seq} is not the one the head names: replaced, records added after it")
    return chain


def _hash_at(path: Path, seq: int, chain: VerifyReport) -> str:
    """The hash of the record at ``seq`` of a chain that verified (the one before its first
    record: that record's prev_hash)."""
    if seq < chain.first_seq:
        return chain.first_prev_hash
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=chain.first_seq):
            if lineno == seq:
                return str(_loads(raw)["hash"])
    return ""


def _read_head(head: Path) -> tuple[int, str] | None:
    """``gateway.audit.read_head``, its OSError worded for the report."""
    try:
        return read_head(head)
    except OSError as exc:
        raise OSError(f"cannot be read: {exc.strerror or exc}") from None


def _check_empty(path: Path, head: Path, anchor: tuple[int, str] | None, chain: VerifyReport) -> VerifyReport:
    """An empty active log: new, or a rotation cut short; anything else lost its records."""
    rotated = _rotated_beside(path)
    if anchor is None or anchor[0] == 0:
        if rotated:
            return _broken(chain, 0, f"empty, but rotated files of it exist (the newest: {rotated[-1][1].name}): "
                           "the records after them were removed")
        return chain
    seq, digest = anchor
    if rotated and rotated[-1][0] == seq:
        newest = verify_file(rotated[-1][1])
        if newest.ok and newest.last_hash == digest:
            return dataclasses.replace(chain, note=f"the rotation into {rotated[-1][1].name} is not finished "
                                       "(the gateway finishes it when it starts)")
    return _broken(chain, 0, f"empty, but its head ({head.name}) says the log ends at seq {seq}: "
                   "its records were removed")


def _rotated_beside(path: Path) -> list[tuple[int, Path]]:
    """The rotated files of the log at ``path`` in its folder, oldest first."""
    prefix = path.name + "."
    found = []
    with os.scandir(path.parent) as entries:
        for entry in entries:
            suffix = entry.name[len(prefix):]
            if entry.name.startswith(prefix) and len(suffix) == 12 and suffix.isdigit():
                found.append((int(suffix), path.with_name(entry.name)))
    return sorted(found)


def verify_segments(paths: Iterable[str | Path], keys: Keys | None = None) -> list[tuple[Path, VerifyReport]]:
    """``verify_file`` for each, in the order given, and for the files of one rotated log
    (``<log>.<seq>`` … ``<log>``) among them, that each non-empty one goes on exactly from the
    last non-empty one before it: a missing or emptied file is a gap in seq, a replaced one a
    prev_hash that does not match. A file broken part-way is not compared with: its end is unknown."""
    reports = [(Path(p), verify_file(p, keys)) for p in paths]
    chains: dict[Path, list[tuple[int, int]]] = {}
    for i, (path, _) in enumerate(reports):
        base, order = _segment_of(path)
        chains.setdefault(base, []).append((order, i))
    for members in chains.values():
        before: tuple[Path, VerifyReport] | None = None  # the last non-empty file whose chain verified
        for _, i in sorted(members):
            path, report = reports[i]
            if not report.ok:
                if not _is_empty(path):
                    before = None
            elif report.records:
                if before is not None:
                    reports[i] = (path, _follows(before, report))
                before = (path, report)
    return reports


def holds(reports: Iterable[tuple[Path, VerifyReport]], seq: int, digest: str) -> bool:
    """Whether one of the files that verified holds the record at ``seq`` whose hash is ``digest``
    (a record known from elsewhere: a checkpoint the operational log announced)."""
    return any(r.ok and r.records and r.first_seq <= seq <= r.last_seq and _hash_at(path, seq, r) == digest
               for path, r in reports)


def _follows(previous: tuple[Path, VerifyReport], b: VerifyReport) -> VerifyReport:
    a_path, a = previous
    if b.first_seq > a.last_seq + 1:
        return VerifyReport(False, 0, 1, f"starts at seq {b.first_seq} but {a_path.name} ends at {a.last_seq}: "
                                         f"records {a.last_seq + 1}-{b.first_seq - 1} are missing")
    if b.first_seq != a.last_seq + 1:
        return VerifyReport(False, 0, 1, f"starts at seq {b.first_seq}, inside {a_path.name} "
                                         f"(seq {a.first_seq}-{a.last_seq})")
    if b.first_prev_hash != a.last_hash:
        return VerifyReport(False, 0, 1, f"does not go on from {a_path.name}: "
                                         "its first prev_hash is not that file's last hash")
    return b


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return True


_SET_ASIDE = re.compile(r"^(?P<log>.+)\.(?P<kind>cut|torn)-[0-9]+(?:-[0-9]+)?\Z")


def companion_reason(path: str | Path) -> str:
    """Why ``path`` is a file the writer keeps beside a log, not a segment of it ("" when it is
    none): a name ``<log>.cut-<ns>[-<n>]`` or ``<log>.torn-<ns>[-<n>]`` (evidence set aside at a
    start, ``gateway.audit``), their ``.head``, ``<log>.head`` beside an existing ``<log>``, or
    ``<log>.lock`` (``gateway.audit_file.lock_log``)."""
    path = Path(path)
    name = path.name
    head = name.endswith(".head") and len(name) > len(".head")
    kept = _SET_ASIDE.match(name[:-len(".head")] if head else name)
    if kept and kept["kind"] == "cut":
        what = "the head of a log" if head else "a log"
        return (f"{what} cut short (or beside a head that was not one), set aside when the gateway started (its audit_restarted record in "
                f"{kept['log']} names it): evidence, not a segment")
    if kept and not head:
        return (f"a partial line set aside when the gateway started (its audit_restarted record in "
                f"{kept['log']} names it): not a record")
    if head and path.with_name(name[:-len(".head")]).is_file():
        return f"the head of {name[:-len('.head')]}: checked with that log"
    if name.endswith(".lock") and len(name) > len(".lock"):
        return f"the lock file of {name[:-len('.lock')]} (its writer's pid): not a record"
    return ""


_ACTIVE = 1 << 62
"""The position of the active log among its rotated files (``_segment_of``)."""


def _segment_of(path: Path) -> tuple[Path, int]:
    """(the log's path, position): ``<log>.<12 digits>`` is a rotated file of ``<log>``."""
    path = path.resolve()
    stem, _, suffix = path.name.rpartition(".")
    if stem and len(suffix) == 12 and suffix.isdigit():
        return path.with_name(stem), int(suffix)
    return path, _ACTIVE
