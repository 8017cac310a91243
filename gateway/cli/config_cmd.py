"""``toolgate config check FILE``: would a gateway start with this config? (``gateway.preflight``)"""

from __future__ import annotations

import argparse
import sys

from gateway.cli._errors import EXIT, fail
from gateway.config import ConfigError, load_config
from gateway.terminal import shown


def add_parser(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser(
        "config",
        help="check a gateway config without starting",
        description="Work with the gateway's YAML config file.",
    )
    verbs = config.add_subparsers(dest="config_verb", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check",
        help="report everything a start with FILE would refuse",
        description="Load FILE as 'toolgate serve --config FILE' would, then read what a start reads: the "
        "tools' schemas, the policy bundle (and the shadow bundle), the secrets providers, the approvers' "
        "and the grant keys, the audit signing key and the TLS files. Every problem is printed, not only "
        "the first: errors as 'toolgate: <code>: <message>' on stderr (exit 2), then warnings, calls that "
        "would be refused (a tenant without a secret a tool needs), a certificate near its end, a folder "
        "this user cannot write, as 'warning: <code>: <message>' on stdout. Nothing is written or "
        "contacted: no key is made, no port bound, OPA and PostgreSQL are not asked. Exit 0 when a start "
        "would get past all of it (the port, OPA and the store are checked only by a start).",
    )
    check.add_argument("config", metavar="FILE", help="the gateway's YAML config file")
    check.set_defaults(func=run_check)


def run_check(ns: argparse.Namespace) -> int:
    try:
        config = load_config(ns.config)
    except ConfigError as exc:
        return fail("config_invalid", f"{exc}")
    from gateway.preflight import check_config

    report = check_config(config)
    for line in report.summary:
        print(shown(line))
    for finding in report.findings:
        if finding.level == "warning":
            print(f"warning: {finding.code}: {shown(finding.message)}")
    sys.stdout.flush()
    for finding in report.errors:
        fail(finding.code, finding.message)
    if report.errors:
        return EXIT[report.errors[0].code]
    print(f"config ok: {shown(str(ns.config))}")
    return 0
