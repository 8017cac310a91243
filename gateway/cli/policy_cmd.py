"""``toolgate policy``: test, check and replay Rego policy bundles.

    toolgate policy test DIR [-v] [--engine embedded|opa]
    toolgate policy check DIR
    toolgate policy replay --audit FILE... --policy DIR

Each verb returns the process exit code: 0 on success, 1 when tests fail, 2 when the
bundle or a file cannot be read (``toolgate: policy_bundle_invalid|audit_unreadable|
audit_malformed: ...`` on stderr). Changed decisions in a replay are a result, not an
error: replay returns 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from gateway.audit_verify import companion_reason
from gateway.cli._errors import fail
from gateway.terminal import shown

EXIT_OK = 0
EXIT_FAILED = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``policy`` and its verbs on the main CLI's subparsers."""
    policy = subparsers.add_parser(
        "policy",
        help="test, check and replay Rego policy bundles",
        description="Work with Rego policy bundles: run their *_test.rego, check that they load, "
        "replay audited calls against a candidate bundle.",
    )
    verbs = policy.add_subparsers(dest="policy_verb", metavar="VERB", required=True)
    _add_test(verbs)
    _add_check(verbs)
    _add_replay(verbs)


def _add_test(verbs: argparse._SubParsersAction) -> None:
    test = verbs.add_parser(
        "test",
        help="run the bundle's *_test.rego like `opa test`",
        description="Load every .rego file under DIR (tests included) and evaluate every rule named "
        "test_* in every package. A test passes when it evaluates to true, fails when it is undefined "
        "or false, and is an ERROR when evaluation raises. Exit code 0 only when all tests pass.",
    )
    test.add_argument("dir", metavar="DIR", type=Path, help="the policy bundle folder, e.g. rego/")
    test.add_argument("-v", "--verbose", action="store_true", help="print every test, not only failures")
    test.add_argument(
        "--engine",
        choices=("embedded", "opa"),
        default="embedded",
        help="embedded: regorus in-process (default); opa: the real `opa test` (TOOLGATE_OPA or PATH)",
    )
    test.set_defaults(func=run_test)


def _add_check(verbs: argparse._SubParsersAction) -> None:
    check = verbs.add_parser(
        "check",
        help="load the bundle and report load errors",
        description="Load DIR as the embedded engine would (tests excluded) and report parse errors, bad "
        "data files, definitions OPA would refuse to compile together (two defaults for one rule, a function "
        "and a rule of one name, a data file holding a document where a rule is defined), builtins the "
        "embedded engine does not implement, rule bodies using a variable nothing binds or assigning one "
        "twice, and variables that appear only under `not`. Exit code 0 when it loads.",
    )
    check.add_argument("dir", metavar="DIR", type=Path, help="the policy bundle folder")
    check.set_defaults(func=run_check)


def _add_replay(verbs: argparse._SubParsersAction) -> None:
    replay = verbs.add_parser(
        "replay",
        help="re-evaluate audited policy inputs against a candidate bundle",
        description="Read the audit log (JSON lines), take the policy records that carry a policy_input "
        "(written when the decision's audit level was full), evaluate each against the candidate bundle "
        "and print those whose decision changes. Exit code 0 when the replay ran, changes or not.",
    )
    replay.add_argument("--audit", required=True, type=Path, nargs="+", action="extend", metavar="FILE",
                        help="the audit log (JSON lines); several, for rotated files or workers' logs "
                        "(--audit data/audit*.jsonl*: the files kept beside a log, .head, .lock, .cut-*, "
                        ".torn-*, are skipped with a note)")
    replay.add_argument("--policy", required=True, type=Path, metavar="DIR", help="the candidate bundle folder")
    replay.set_defaults(func=run_replay)


def run_test(ns: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``policy test``: print PASS/FAIL/ERROR lines and a summary; 0 only if all pass."""
    from policies import PolicyLoadError, run_tests

    out = out or sys.stdout
    try:
        results = run_tests(ns.dir, engine=ns.engine)
    except PolicyLoadError as exc:
        return fail("policy_bundle_invalid", f"{exc}", err)
    for result in results:
        if ns.verbose or not result.passed:
            line = f"{result.package}.{result.name}: {result.status} ({result.duration * 1000:.3f}ms)"
            print(line if not result.error else f"{line}\n  {result.error}", file=out)
    return _summary(results, out)


def _summary(results: list, out: TextIO) -> int:
    """opa test's summary: PASS/FAIL/ERROR counts out of the total; 0 only if all pass."""
    total = len(results)
    if not total:
        print("FAIL: 0/0 (no test_* rules found)", file=out)
        return EXIT_FAILED
    counts = {status: sum(r.status == status for r in results) for status in ("PASS", "FAIL", "ERROR")}
    if counts["PASS"] != total:
        print("-" * 80, file=out)
    for status, count in counts.items():
        if count:
            print(f"{status}: {count}/{total}", file=out)
    return EXIT_OK if counts["PASS"] == total else EXIT_FAILED


def run_check(ns: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``policy check``: 0 and the bundle version when it loads, 2 and the error when not."""
    from policies import EmbeddedEngine, PolicyLoadError

    out = out or sys.stdout
    try:
        engine = EmbeddedEngine.from_bundle(ns.dir)
    except PolicyLoadError as exc:
        return fail("policy_bundle_invalid", f"{exc}", err)
    print(f"ok: {ns.dir} loads ({engine.version})", file=out)
    for line in engine.divergences():
        print(f"warning: engine_divergence: {shown(line)}", file=out)
    return EXIT_OK


def run_replay(ns: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``policy replay``: print changed decisions and a summary (fields escaped: they come from
    the audit log); 2 if a file cannot be read."""
    from policies import PolicyLoadError
    from policies.replay import ReplayError, format_report, replay_file

    out = out or sys.stdout
    files = []
    for path in dict.fromkeys(ns.audit):  # each once
        if reason := companion_reason(path):
            print(f"toolgate: skipped {shown(str(path))}: {reason}", file=err or sys.stderr)
        else:
            files.append(path)
    try:
        report = replay_file(files, ns.policy)
    except PolicyLoadError as exc:
        return fail("policy_bundle_invalid", f"{exc}", err)
    except ReplayError as exc:
        return fail(exc.code, f"{exc}", err)
    print(format_report(report), file=out)
    return EXIT_OK
