"""How a command reports that it could not do what was asked: a line on stderr,

    toolgate: <code>: <message>

The code is stable snake_case (scripts match on it); the message says what to do about it and
is printed with control characters escaped (it may hold a path, a server's words or a record's).
Each code has one exit status (``gateway.cli`` says what the statuses mean):

    1  watch_ended                  ``approvals watch --until S`` ended without an event S
    2  usage_error                  the command line does not parse (argparse's message, then
                                    ``(see toolgate VERB --help)``)
       argument_not_utf8            a text option (not a file name) holds bytes that are not UTF-8
       no_such_file                 a FILE argument does not exist
       nothing_to_verify            ``audit verify`` was given companion files only
       invalid_public_key, public_key_required    ``audit verify --public-key`` is no Ed25519
                                    PEM public key; ``--require-signed`` without one
       invalid_expected_record      ``audit verify --expect-record`` is not SEQ:HASH
       invalid_time                 ``--since``/``--until`` is no finite time
       config_invalid, cannot_start ``serve``: the config, or start-up, failed
       tool_schema_invalid, policy_bundle_invalid, credentials_invalid, approvals_invalid,
       grant_key_invalid, audit_signing_key_invalid, tls_file_invalid
                                    ``config check``: what a start would stop on
       invalid_approver_id, key_file_exists, key_dir_unwritable    ``keys new`` (and ``keys grant``, ``keys audit``)
       passphrase_env_unset         ``--passphrase-env VAR`` names an unset or empty variable
       key_file_not_found, key_file_unreadable, key_file_writable,
       key_file_readable, key_passphrase_needed, key_passphrase_wrong,
       key_not_encrypted, key_invalid, key_labels_missing          the approver's key
       policy_bundle_invalid, audit_unreadable, audit_malformed    ``policy`` (audit_unreadable: ``audit
                                    search``/``verify`` too, e.g. a FILE that is a directory)
       invalid_target               ``--target`` is not HOST:PORT or unix:PATH (client verbs)
       insecure_target, tls_file_unreadable   plaintext off this machine; a TLS file (client verbs)
       tls_ca_file_invalid, tls_client_cert_invalid   ``--ca-file``/``--client-cert`` holds no PEM certificate
       tls_key_file_writable, tls_key_file_readable   ``--client-key`` another user owns, or others
                                    may write (its group too) or read
       api_key_invalid              the API key holds what gRPC metadata cannot carry
       client_cert_incomplete       ``--client-key`` without ``--client-cert``, or the other way round
       invalid_lifetime             ``approve``/``reject --lifetime`` is no whole number of seconds in range
       reason_too_long              ``reject --reason`` is longer than a gateway keeps
    3  args_not_strict_json, args_hash_mismatch, request_malformed
                                    ``approve`` refused to sign a request it cannot show exactly
       audience_mismatch, not_confirmed   ``approve``/``reject`` refused to sign
    6  gateway_unreachable, unauthenticated, demo_failed          ``demo``

gRPC failures print the gateway's outcome code when its details carry one (``{"code": ...,
"message": ...}``: ``toolgate: approval_rejected: ...``), else the status name (``toolgate:
not_found: ...``; ``refused`` for an approve/reject the gateway refused without a code). The exit
status follows the status (``gateway.cli._client.REFUSED_STATUSES``): 3 for a refusal by the
gateway (invalid_argument, not_found, permission_denied, failed_precondition, already_exists,
resource_exhausted, out_of_range, aborted, unimplemented); 6 for the rest: the gateway could not be
reached or answer (unavailable, deadline_exceeded, cancelled, internal, unknown, data_loss) or
refused the credentials (unauthenticated).
"""

from __future__ import annotations

import sys
from typing import TextIO

from gateway.terminal import shown

EXIT: dict[str, int] = {
    "watch_ended": 1,
    **dict.fromkeys((
        "argument_not_utf8", "no_such_file", "nothing_to_verify", "invalid_public_key", "public_key_required",
        "invalid_expected_record", "invalid_time", "config_invalid", "cannot_start",
        "invalid_approver_id", "key_file_exists", "key_dir_unwritable", "passphrase_env_unset",
        "key_file_not_found", "key_file_unreadable", "key_file_writable", "key_file_readable",
        "key_passphrase_needed", "key_passphrase_wrong", "key_not_encrypted", "key_invalid", "key_labels_missing",
        "policy_bundle_invalid", "audit_unreadable", "audit_malformed", "insecure_target", "tls_file_unreadable",
        "tls_key_file_writable", "tls_key_file_readable", "usage_error", "invalid_target", "tls_ca_file_invalid",
        "tls_client_cert_invalid", "tool_schema_invalid", "credentials_invalid", "approvals_invalid",
        "grant_key_invalid", "audit_signing_key_invalid", "tls_file_invalid",
        "invalid_lifetime", "api_key_invalid", "client_cert_incomplete", "reason_too_long",
    ), 2),
    **dict.fromkeys(("args_not_strict_json", "args_hash_mismatch", "request_malformed", "audience_mismatch",
                     "not_confirmed"), 3),
    **dict.fromkeys(("gateway_unreachable", "unauthenticated", "demo_failed"), 6),
}
"""Every CLI error code and its exit status."""


class CliError(Exception):
    """Raised by a command's helpers when it cannot go on; ``gateway.cli.main`` (or the
    command) prints it with ``fail``. An unknown ``code`` is a programming error (ValueError)."""

    def __init__(self, code: str, message: str) -> None:
        if code not in EXIT:
            raise ValueError(f"unknown CLI error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def fail(code: str, message: str, file: TextIO | None = None) -> int:
    """Print ``toolgate: <code>: <message>`` on ``file`` (stderr); the code's exit status. Each
    line of the message is escaped; lines after the first (a parse error's excerpt) are indented,
    so no line of it can pass for another error."""
    if code not in EXIT:
        raise ValueError(f"unknown CLI error code {code!r}")
    text = "\n    ".join(shown(line) for line in message.split("\n"))
    print(f"toolgate: {code}: {text}", file=file or sys.stderr)
    return EXIT[code]


def report(exc: CliError, file: TextIO | None = None) -> int:
    """``fail`` for a raised ``CliError``."""
    return fail(exc.code, exc.message, file)
