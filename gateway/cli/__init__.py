"""``toolgate``: run the gateway, call tools, approve calls, test policies, verify the audit log.

Exit codes: 0 success; 1 a tool ran and failed; 2 bad usage or configuration; 3 refused;
4 approval required; 5 evidence required; 6 the gateway could not be reached or refused the
credentials; 130 interrupted (Ctrl-C); 141 the reader of standard output went away (``| head``:
the rest of the output is dropped quietly, as by a process SIGPIPE ends). An error prints one
line, ``toolgate: <code>: <message>``, with a stable snake_case code (``gateway.cli._errors``
lists them with their exit status); a command line that does not parse is
``toolgate: usage_error: <what argparse says> (see toolgate VERB --help)``, exit 2. The client
verbs keep gRPC's C core from logging to stderr (``GRPC_VERBOSITY``, unless set).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Iterator, NoReturn

from gateway.cli._errors import EXIT, CliError, fail, report

# Sub-command modules, each with add_parser(subparsers). Order is the order in --help.
COMMANDS = (
    "gateway.cli.serve_cmd",
    "gateway.cli.config_cmd",
    "gateway.cli.client_cmds",
    "gateway.cli.approvals_cmd",
    "gateway.cli.keys_cmd",
    "gateway.cli.policy_cmd",
    "gateway.cli.audit_cmd",
    "gateway.cli.demo_cmd",
)

# Options holding file names. Every other text option goes into a request, a token, a query or
# a printout, and must be UTF-8; a file name need not be (POSIX names are bytes).
PATH_OPTIONS = frozenset({"config", "key", "out", "ca_file", "client_cert", "client_key", "files",
                          "checkpoints", "audit_log", "approver_key"})


EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program the signal ended (``yes | head -1``)."""


class Parser(argparse.ArgumentParser):
    """The root parser and every sub-command's (argparse makes sub-parsers of the parser's class):
    a command line that does not parse is one error line, ``usage_error``, not a usage block."""

    def error(self, message: str) -> NoReturn:
        fail("usage_error", f"{message} (see {self.prog} --help)")
        self.exit(EXIT["usage_error"])


def build_parser() -> Parser:
    parser = Parser(
        prog="toolgate",
        description="A policy-engine-centric tool gateway for AI agents.",
        epilog="Run 'toolgate VERB --help' for a verb's options. "
        "--target/--api-key default to $TOOLGATE_TARGET/$TOOLGATE_API_KEY.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["serve"]:  # the server's logs are its own
        quiet_grpc_core()
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not getattr(ns, "func", None):
        parser.print_help()
        return 2
    try:
        check_text(parser, ns)
        status = int(ns.func(ns) or 0)
        sys.stdout.flush()  # here, so a reader gone is noticed here, not at exit
        return status
    except CliError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_gone()


def quiet_grpc_core() -> None:
    """Keep gRPC's C core from logging to stderr (``E1123 ... ssl_transport_security.cc``): a client
    verb says what went wrong in one line. The core reads ``GRPC_VERBOSITY`` once, when ``grpc``
    is imported, so this runs before the sub-command modules are (``build_parser``); a
    ``GRPC_VERBOSITY`` the user set is kept. The verb is the first argument: the root parser
    takes no option but --help."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")


def _reader_gone() -> int:
    """Standard output's reader went away (``toolgate ... | head``): stop quietly. Standard output
    is pointed at /dev/null, so flushing what is left at exit cannot fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def check_text(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Refuse (``argument_not_utf8``) a text option that is not UTF-8: bytes that are not UTF-8
    in argv (or the environment) reach Python as lone surrogates, which cannot be sent or printed."""
    for action in _chosen_actions(parser, ns):
        values = None if action.dest in PATH_OPTIONS else getattr(ns, action.dest, None)
        for value in values if isinstance(values, list) else [values]:
            at = _lone_surrogate(value) if isinstance(value, str) else -1
            if at >= 0:
                name = "/".join(action.option_strings) or (action.metavar or action.dest).upper()
                source = " (its value came from the environment)" if value is action.default else ""
                code = ord(value[at])
                byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
                raise CliError("argument_not_utf8", f"{name}{source} is not valid UTF-8 ({byte} at character {at}): "
                               "give it as UTF-8 text (was it written in another encoding, such as Latin-1?)")


def _lone_surrogate(text: str) -> int:
    """Where the first lone surrogate (what UTF-8 cannot encode) in ``text`` is; -1: none."""
    return next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), -1)


def _chosen_actions(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> Iterator[argparse.Action]:
    """The options of ``parser`` and of the sub-command (and its verb) that ``ns`` chose."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(ns, action.dest, None) or "")
            if chosen is not None:
                yield from _chosen_actions(chosen, ns)
        else:
            yield action


if __name__ == "__main__":
    sys.exit(main())
