"""``toolgate``: run the gateway, call tools, approve calls, test policies, verify the audit log.

Exit codes: 0 success; 1 a tool ran and failed; 2 bad usage or configuration; 3 refused;
4 approval required; 5 evidence required; 6 the gateway could not be reached or refused the
credentials. An error prints one line, ``toolgate: <code>: <message>``, with a stable
snake_case code (``gateway.cli._errors`` lists them with their exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from gateway.cli._errors import CliError, report

# Sub-command modules, each with add_parser(subparsers). Order is the order in --help.
COMMANDS = (
    "gateway.cli.serve_cmd",
    "gateway.cli.client_cmds",
    "gateway.cli.approvals_cmd",
    "gateway.cli.keys_cmd",
    "gateway.cli.policy_cmd",
    "gateway.cli.audit_cmd",
    "gateway.cli.demo_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolgate",
        description="A policy-engine-centric tool gateway for AI agents.",
        epilog="Run 'toolgate VERB --help' for a verb's options. "
        "--target/--api-key default to $TOOLGATE_TARGET/$TOOLGATE_API_KEY.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not getattr(ns, "func", None):
        parser.print_help()
        return 2
    try:
        return int(ns.func(ns) or 0)
    except CliError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
