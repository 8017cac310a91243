"""``toolgate audit verify FILE...`` checks hash chains; ``toolgate audit search FILE...``
finds records (``gateway.audit_search``)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from gateway.audit import iter_steps
from gateway.audit_search import Criteria, Search, Unreadable
from gateway.audit_sign import read_public_keys
from gateway.audit_verify import VerifyReport, companion_reason, holds, verify_segments
from gateway.cli._errors import CliError, fail
from gateway.terminal import json_text, shown

_EXPECTED = re.compile(r"(?P<seq>[1-9][0-9]{0,18}):(?P<hash>sha256:[0-9a-f]{64})")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="inspect the audit log", description="Audit log tools.")
    verbs = p.add_subparsers(dest="audit_verb", metavar="VERB", required=True)
    v = verbs.add_parser(
        "verify", help="verify the hash chain",
        description="Check seq, prev_hash and hash of every record of each log (with workers: N, one "
        "per worker: audit.w0.jsonl, ...) and its .head anchor (audit.jsonl.head: required beside a "
        "non-empty log, the log must not end before it). A rotated file (audit.jsonl.<seq>) must end "
        "at the seq in its name; rotated files of one log given together (audit.jsonl.[0-9]* "
        "audit.jsonl) must go on from each other without a gap. An empty log is fine only when new "
        "(no rotated files beside it) or when a stop cut a rotation short. Prints one line per file: "
        "ok, or BROKEN with the first broken line and why. The files kept beside a log (its .head, its "
        ".lock, and .cut-* and .torn-* evidence set aside at a start), as audit.jsonl* matches them, are skipped with "
        "the reason; a file given twice is verified once.",
        epilog="Exit status: 0 every log intact; 1 a log is broken (edited, reordered, truncated, emptied, "
        "malformed, a file missing or replaced in between, its head missing or not matching, a checkpoint "
        "signature that does not verify with a --public-key, an unsigned tail with --require-signed, an "
        "--expect-record no log holds); 2 a "
        "FILE does not exist, no FILE is a log, a --public-key is no Ed25519 PEM public key (or the command "
        "line is wrong).",
    )
    v.add_argument("files", nargs="+", metavar="FILE", help="audit logs (JSON lines)")
    v.add_argument("--public-key", action="append", default=[], metavar="PEM",
                   help="check every signed checkpoint (audit_checkpoint) against this Ed25519 public key: the "
                   ".pub beside audit.signing_key, kept off the gateway's host (repeat for several keys). A "
                   "checkpoint that does not verify with one of them breaks the log. Without it, checkpoints "
                   "are counted, not checked")
    v.add_argument("--require-signed", action="store_true",
                   help="with --public-key: a log must end with a signed checkpoint (a rotated file, or the log "
                   "of a gateway that stopped, does; a running gateway's log has an unsigned tail of up to "
                   "audit.checkpoint_seconds)")
    v.add_argument("--expect-record", action="append", default=[], metavar="SEQ:HASH",
                   help="a record the logs must hold, as a copy kept off the gateway's host knows it: the seq "
                   "and hash of an audit_checkpoint the gateway announced on its operational log (stderr, event "
                   "audit_checkpoint, seq=... hash=...). Whoever can write the log files can cut them back to an "
                   "earlier checkpoint, or remove the active log, and what is left verifies; it no longer holds "
                   "a later record known elsewhere. Repeatable (one per worker's log)")
    v.set_defaults(func=run_verify)
    s = verbs.add_parser(
        "search", help="find the records of calls, decisions and approvals",
        description="Print the records (JSON lines, as stored) that match every option given, merged "
        "across the logs in time order. A call's later records match through its decision id, so "
        "--agent X shows X's calls whole. Exits 1 when nothing matched. Example: "
        "toolgate audit search data/audit.jsonl --agent demo-agent --code policy_denied --since 2026-11-01",
    )
    s.add_argument("files", nargs="+", metavar="FILE", help="audit logs (JSON lines)")
    s.add_argument("--decision-id", default="", help="one call's records (and its approval's events)")
    s.add_argument("--tool", default="", help="records about this tool")
    s.add_argument("--code", default="", help="records with this outcome code, the record's or a step's "
                   "(e.g. policy_denied, approval_args_mismatch)")
    s.add_argument("--tenant", default="", help="calls (and approval events) of this tenant")
    s.add_argument("--agent", default="", help="calls of this agent")
    s.add_argument("--user", default="", help="calls on behalf of this user")
    s.add_argument("--since", metavar="TIME", help="not before TIME (ISO 8601, UTC if no zone; or epoch s)")
    s.add_argument("--until", metavar="TIME", help="not after TIME")
    s.add_argument("--steps", action="store_true", help="one line per step instead of per record")
    s.set_defaults(func=run_search)


def _time(option: str, text: str | None) -> float | None:
    """Epoch seconds of ``--since``/``--until``; a time that is not finite (nan, inf) would
    match every record or none, so it is refused like one that does not parse."""
    if text is None:
        return None
    try:
        when = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise CliError("invalid_time", f"{option} {text!r} is neither ISO 8601 nor epoch seconds "
                           "(e.g. 2026-11-01T12:00:00Z or 1793534400)") from None
        when = (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    if not math.isfinite(when):
        raise CliError("invalid_time", f"{option} {text!r} is not a finite time: give ISO 8601 or epoch seconds")
    return when


def _unusable(files: list[str]) -> list[str]:
    """The FILEs that are no file to read, each reported: ``no_such_file`` when nothing is there,
    ``audit_unreadable`` when something else is (a directory)."""
    unusable = [f for f in files if not Path(f).is_file()]
    for f in unusable:
        if Path(f).exists():
            fail("audit_unreadable", f"{f}: cannot be read: {_not_a_file(Path(f))} (FILE must be an audit log, "
                 "e.g. data/audit.jsonl)")
        else:
            fail("no_such_file", f"{f} (check the path: FILE must be an audit log)")
    return unusable


def _not_a_file(path: Path) -> str:
    return "it is a directory" if path.is_dir() else "it is not a regular file"


def _segments(files: list[str]) -> list[str]:
    """The files to verify: each once (the first spelling of it), the files kept beside a log
    (companion_reason) reported as skipped."""
    seen: set[Path] = set()
    segments = []
    for f in files:
        real = Path(f).resolve()
        if real in seen:
            continue
        seen.add(real)
        reason = companion_reason(f)
        if reason:
            print(shown(f"{f}: skipped: {reason}"))
        else:
            segments.append(f)
    return segments


def run_verify(ns: argparse.Namespace) -> int:
    if _unusable(ns.files):
        return 2
    segments = _segments(ns.files)
    if not segments:
        return fail("nothing_to_verify", "no FILE is an audit log or a rotated file of one "
                    "(give the log, e.g. audit.jsonl, or audit.jsonl*)")
    if ns.require_signed and not ns.public_key:
        return fail("public_key_required", "--require-signed needs --public-key: a signature is only "
                    "worth something checked against a key you hold")
    try:
        keys = read_public_keys(ns.public_key) if ns.public_key else None
    except ValueError as exc:
        return fail("invalid_public_key", str(exc))
    expected = []
    for text in ns.expect_record:
        if not (found := _EXPECTED.fullmatch(text)):
            return fail("invalid_expected_record", f"--expect-record {text[:100]!r} is not SEQ:HASH "
                        "(e.g. 42:sha256:<64 hex digits>, as the audit_checkpoint event gives them)")
        expected.append((int(found["seq"]), found["hash"]))
    broken = 0
    reports = verify_segments(segments, keys)
    for path, report in reports:
        if report.ok and ns.require_signed and report.signed_seq != report.last_seq:
            report = dataclasses.replace(report, ok=False, line=0, reason=(
                f"records after the last signed checkpoint (seq {report.signed_seq}), and --require-signed "
                "was given" if report.signed_seq else "no signed checkpoint, and --require-signed was given"))
        if report.ok:
            span = f" (seq {report.first_seq}-{report.last_seq})" if report.records else ""
            note = f"; {report.note}" if report.note else ""
            print(shown(f"{path}: ok: {report.records} records{span}, chain intact{_signed(report, keys)}{note}"))
        else:
            broken += 1
            where = f" at line {report.line}" if report.line else ""
            print(shown(f"{path}: BROKEN{where}: {report.reason} ({report.records} records verified before it)"))
    for seq, digest in expected:
        if holds(reports, seq, digest):
            print(f"expected record seq {seq}: held")
        else:
            broken += 1
            print(f"expected record seq {seq} ({digest}): MISSING from every log that verified: records were "
                  "removed back past it (or a log was left out, or the record named is not in these logs)")
    return 1 if broken else 0


def _signed(report: VerifyReport, keys: dict[str, object] | None) -> str:
    """What the ok line says of the log's checkpoints."""
    if keys is None:
        return f"; {report.checkpoints} checkpoint(s), signatures not checked (give --public-key)" if report.checkpoints else ""
    if not report.checkpoints:
        return "; no signed checkpoint: nothing in it is signed"
    tail = report.last_seq - report.signed_seq
    after = f", {tail} record(s) after it unsigned" if tail else ", nothing after it"
    return f"; {report.checkpoints} signed checkpoint(s) verified, the last at seq {report.signed_seq}{after}"


def run_search(ns: argparse.Namespace) -> int:
    if _unusable(ns.files):
        return 2
    criteria = Criteria(decision_id=ns.decision_id, tool=ns.tool, code=ns.code, tenant=ns.tenant, agent=ns.agent,
                        user=ns.user, since=_time("--since", ns.since), until=_time("--until", ns.until))
    search = Search(criteria)
    files = []
    for f in ns.files:  # as verify does: the files kept beside a log hold no records to search
        if reason := companion_reason(f):
            print(shown(f"toolgate: skipped {f}: {reason}"), file=sys.stderr)
        else:
            files.append(Path(f))
    found = search.run(files)
    try:
        for item in (iter_steps(found) if ns.steps else found):
            print(json_text(item, separators=(",", ":")))
    except Unreadable as exc:
        return fail("audit_unreadable", f"{exc} (what was found before it is printed above)")
    for where in search.skipped[:5]:
        print(shown(f"toolgate: skipped a line that is not an audit record: {where}"), file=sys.stderr)
    if len(search.skipped) > 5:
        print(f"toolgate: ... and {len(search.skipped) - 5} more", file=sys.stderr)
    print(f"{search.matched} of {search.read} records matched", file=sys.stderr)
    return 0 if search.matched else 1
