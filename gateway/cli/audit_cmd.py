"""``toolgate audit verify FILE``: check the audit log's hash chain."""

from __future__ import annotations

import argparse
import sys

from gateway.audit import verify_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="inspect the audit log", description="Audit log tools.")
    verbs = p.add_subparsers(dest="audit_verb", metavar="VERB", required=True)
    v = verbs.add_parser(
        "verify", help="verify the hash chain",
        description="Check seq, prev_hash and hash of every record (and the .head anchor). "
        "Prints the first broken record and exits 1 if the log was edited, reordered or truncated.",
    )
    v.add_argument("file", help="the audit log (JSON lines)")
    v.set_defaults(func=run_verify)


def run_verify(ns: argparse.Namespace) -> int:
    try:
        report = verify_file(ns.file)
    except FileNotFoundError:
        print(f"toolgate: no such file: {ns.file}", file=sys.stderr)
        return 2
    if report.ok:
        print(f"ok: {report.records} records, chain intact")
        return 0
    print(f"BROKEN at line {report.line}: {report.reason} ({report.records} records verified before it)")
    return 1
