"""``toolgate approvals list|show|approve|reject|watch``: the approver's side.

``approve`` and ``reject`` fetch the request, show it, recompute the args hash themselves
from the arguments they display (strict JSON, RFC 8785) and sign that hash, never one they
were merely told. ``approve`` refuses to sign a request it cannot show exactly: the server's
hash differs, or the arguments are not strict JSON (shown escaped and marked MALFORMED), or the
gateway could not read the stored request whole (a damaged store: it sends it salvaged, saying
what is wrong in its ``damage`` field; shown marked MALFORMED; the gateway refuses to approve it
in any case). Such a
request can still be rejected: ``reject`` says so and binds the rejection to the gateway's
args hash (a rejection can only refuse the call). Then they ask before signing (``--yes``: do
not ask). The token is valid for ``--lifetime`` seconds (default 600), which must not exceed
the gateway's ``approvals.max_approval_lifetime_seconds`` (a gateway refusing it says so, with
its bound: ``approval_lifetime_out_of_range``); ``--reason`` has at most
``MAX_REJECTION_REASON`` characters. Exit codes: 0 done, 1 ``watch --until S`` ended
without an event with status S, 2 bad usage or key, 3 refused (by the gateway, a hash
mismatch, or not confirmed), 6 transport/auth.

What a request shows comes from the agent (run id, arguments) or from policy (reasons), so
every field is printed with control and format characters escaped (``gateway.cli._approvals_view``):
an agent cannot draw a different review on the approver's terminal (new lines, escape
sequences, bidi overrides); so are the gateway's error details. Errors print
``toolgate: <code>: <message>`` (``gateway.cli._errors``).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sys
import time
import uuid
from typing import Any, Iterator

import grpc
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.approvals import tokens
from gateway.approvals.config import DEFAULT_APPROVAL_LIFETIME, MAX_APPROVAL_LIFETIME, MIN_APPROVAL_LIFETIME
from gateway.approvals.keyring import SigningKey, key_labels, load_private_key
from gateway.approvals.service import MAX_REJECTION_REASON
from gateway.arguments import args_hash
from gateway.key_files import KeyFileExposed, pem_encrypted, read_key_file
from gateway.cli._approvals_view import approval_dict, describe, list_line, parsed_args, record_malformed
from gateway.cli._client import (EXIT_TRANSPORT, add_target_options, channel, gateway_refusal, metadata,
                                 report_refusal, report_rpc_error)
from gateway.cli._errors import CliError, fail, report
from gateway.store.base import ApprovalStatus
from gateway.terminal import shown

EXIT_USAGE = 2
APPROVAL_LIFETIME = 600  # seconds, the default --lifetime
# the bounds of approvals.max_approval_lifetime_seconds: every gateway accepts a token living
# ALWAYS_ACCEPTED seconds or less, none one living more than MAX_LIFETIME
ALWAYS_ACCEPTED, MAX_LIFETIME = MIN_APPROVAL_LIFETIME, MAX_APPROVAL_LIFETIME
STATUSES = (*(str(s) for s in ApprovalStatus), "all")
"""What ``list --status`` takes: a request's status, or all of them."""
UNEXPLAINED = frozenset({"invalid approval", "the approval was refused"})
"""The messages of an ``invalid_approval`` that does not say why (the reason is in the gateway's
audit log): a token it did not accept, or a vote it did not count."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("approvals", help="list, review, approve and reject pending calls",
                       description="Review approval requests and sign approvals or rejections.")
    verbs = p.add_subparsers(dest="approvals_verb", metavar="VERB")
    v = verbs.add_parser("list", help="list approval requests of your tenant")
    v.add_argument("--status", default="pending", metavar="STATUS", help=f"{'|'.join(STATUSES)} (default pending)")
    v.add_argument("--limit", type=_count, default=500, metavar="N",
                   help="list at most the newest N (default 500; 0: every one, page by page)")
    v.add_argument("--json", action="store_true", help="print JSON")
    _common(v, run_list)
    v = verbs.add_parser("show", help="show one request: tool, full arguments, reasons, risk, expiry")
    v.add_argument("approval_id")
    v.add_argument("--json", action="store_true", help="print JSON")
    _common(v, run_show)
    for name, func, what in (("approve", run_approve, "an approval"), ("reject", run_reject, "a rejection")):
        v = verbs.add_parser(name, help=f"sign and submit {what}",
                             description=f"Fetch the request, show it, recompute its args hash and submit {what}, signed.")
        v.add_argument("approval_id")
        v.add_argument("--key", required=True, help="your Ed25519 private key (PEM), from `toolgate keys new`")
        v.add_argument("--passphrase-env", default="", metavar="VAR", help="env var holding the key's passphrase")
        v.add_argument("--kid", default="", help="key id (default: the toolgate-kid line of the key file)")
        v.add_argument("--approver", default="", help="your approver id (default: the key file's toolgate-approver line)")
        v.add_argument("--audience", default=os.environ.get("TOOLGATE_GATEWAY_ID", ""),
                       help="the gateway id you expect (env TOOLGATE_GATEWAY_ID); refuse if the request names another")
        if name == "reject":
            v.add_argument("--reason", required=True,
                           help=f"why the call is rejected (shown to the agent; at most {MAX_REJECTION_REASON} "
                           "characters)")
        v.add_argument("--lifetime", default=str(APPROVAL_LIFETIME), metavar="SECONDS",
                       help=f"seconds the signed token stays valid (default {APPROVAL_LIFETIME}, never past the "
                       "request's expiry); a gateway refuses a token living longer than its "
                       f"approvals.max_approval_lifetime_seconds (default {DEFAULT_APPROVAL_LIFETIME}) with "
                       "approval_lifetime_out_of_range, "
                       "naming it (an older gateway: with invalid_approval); "
                       f"{ALWAYS_ACCEPTED} is always accepted")
        v.add_argument("--yes", action="store_true",
                       help="sign without asking (default: show the request, then ask on the terminal)")
        _common(v, func)
    v = verbs.add_parser("watch", help="stream approval events as JSON lines")
    v.add_argument("approval_id", nargs="?", default="", help="watch one request (agents: their own only)")
    v.add_argument("--include-current", action="store_true", help="first print the current state")
    v.add_argument("--until", default="", help="stop after an event with this status (e.g. approved); "
                   "exit 1 if the stream ends (--timeout) before one")
    _common(v, run_watch)
    p.set_defaults(func=lambda ns: (p.print_help(), EXIT_USAGE)[1])


def _common(p: argparse.ArgumentParser, func: Any) -> None:
    add_target_options(p)
    p.set_defaults(func=func)


def _stub(ns: argparse.Namespace) -> pb_grpc.ApprovalsStub:
    return pb_grpc.ApprovalsStub(channel(ns))


def _connected(connection: grpc.Channel) -> bool:
    """Whether ``connection`` reached a gateway (its HTTP/2 handshake done): a watch whose time ran
    out on a connected channel ended as asked; on one still connecting, nothing ever answered."""
    try:
        grpc.channel_ready_future(connection).result(timeout=0.5)
    except grpc.FutureTimeoutError:
        return False
    return True


_PAGE = 100
"""Requests asked for in one ``List`` page."""


def run_list(ns: argparse.Namespace) -> int:
    """Page after page (``--limit``): a response holds what fits in a few MiB of arguments, so
    lines are printed as pages come; ``--json`` prints one array at the end."""
    _check_status(ns.status)
    try:
        if ns.json:
            print(json.dumps([approval_dict(a) for a in _listed(ns)], indent=2))
        else:
            for a in _listed(ns):
                print(list_line(a), flush=True)
    except grpc.RpcError as exc:
        return report_rpc_error(exc)
    return 0


def _check_status(status: str) -> None:
    """``--status`` is one of ``STATUSES`` (``usage_error`` otherwise). Checked here, not by
    argparse's choices: after ``check_text``, so text that is not UTF-8 is named as such."""
    if status not in STATUSES:
        raise CliError("usage_error", f"argument --status: invalid choice: {status[:32]!r} (choose from "
                       f"{', '.join(STATUSES)}) (see toolgate approvals list --help)")


def _listed(ns: argparse.Namespace) -> Iterator[pb.Approval]:
    """The newest ``ns.limit`` requests with ``ns.status`` (0: all), as the gateway pages them."""
    stub, status, token, left = _stub(ns), ("" if ns.status == "all" else ns.status), "", ns.limit or None
    while left is None or left > 0:
        resp = stub.List(pb.ListApprovalsRequest(status=status, page_size=min(_PAGE, left or _PAGE), page_token=token),
                         metadata=metadata(ns), timeout=ns.timeout)
        yield from resp.approvals[:left]
        left = None if left is None else left - len(resp.approvals)
        token = resp.next_page_token
        if not token:
            return


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of requests (0: every one)")
    return value


def run_show(ns: argparse.Namespace) -> int:
    try:
        a = _get(ns)
    except grpc.RpcError as exc:
        return report_rpc_error(exc)
    if ns.json:
        print(json.dumps(approval_dict(a), indent=2))
        return 0
    print(describe(a))
    return 0


def run_approve(ns: argparse.Namespace) -> int:
    return _sign_and_send(ns, tokens.TYP_APPROVAL)


def run_reject(ns: argparse.Namespace) -> int:
    return _sign_and_send(ns, tokens.TYP_REJECTION)


def _sign_and_send(ns: argparse.Namespace, typ: str) -> int:
    try:
        lifetime = _lifetime(ns.lifetime)
        if typ == tokens.TYP_REJECTION:
            _check_reason(ns.reason)
        key = _load_key(ns)
    except CliError as exc:
        return report(exc)
    try:
        a = _get(ns)
    except grpc.RpcError as exc:
        return report_rpc_error(exc)
    print(describe(a))
    try:
        mine = _hash_to_sign(a, typ)
    except CliError as exc:
        return report(exc)
    if ns.audience and ns.audience != a.audience:
        return fail("audience_mismatch", f"refusing to sign: the request is for gateway {a.audience!r}, expected "
                    f"{ns.audience!r} (--audience / TOOLGATE_GATEWAY_ID): check --target")
    if not ns.yes and not _confirmed("approve" if typ == tokens.TYP_APPROVAL else "reject"):
        return fail("not_confirmed", "not signed: not confirmed (answer y, or pass --yes)")
    claims = _claims(ns, a, mine, typ, lifetime)
    token = tokens.sign(claims, key, typ)
    request_cls, rpc = (pb.SubmitApprovalRequest, "Submit") if typ == tokens.TYP_APPROVAL else (pb.RejectApprovalRequest, "Reject")
    try:
        out = getattr(_stub(ns), rpc)(request_cls(approval_id=a.approval_id, token=token), metadata=metadata(ns), timeout=ns.timeout)
    except grpc.RpcError as exc:
        if exc.code() is grpc.StatusCode.FAILED_PRECONDITION:
            return report_refusal(exc, _refusal_hints(exc, claims["exp"] - claims["iat"]))
        return report_rpc_error(exc)
    print(json.dumps({"approval_id": out.approval_id, "status": out.status, "approvers": list(out.approvers),
                      "quorum": out.quorum}))
    return 0


def _lifetime(text: str) -> int:
    """``--lifetime``: whole seconds, 1 to ``MAX_LIFETIME``; ``CliError`` otherwise."""
    if not (text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= MAX_LIFETIME):
        raise CliError("invalid_lifetime", f"--lifetime {text[:24]!r} is not a whole number of seconds from 1 to "
                       f"{MAX_LIFETIME}: pass whole seconds, e.g. --lifetime {APPROVAL_LIFETIME}, no more than the "
                       "gateway's approvals.max_approval_lifetime_seconds")
    return int(text)


def _check_reason(reason: str) -> None:
    """``--reason``: at most ``MAX_REJECTION_REASON`` characters (a gateway refuses a longer one,
    never cuts it); ``CliError`` otherwise, before anything is signed."""
    if len(reason) > MAX_REJECTION_REASON:
        raise CliError("reason_too_long", f"--reason has {len(reason)} characters; a gateway keeps at most "
                       f"{MAX_REJECTION_REASON}: say it shorter")


def _hash_to_sign(a: pb.Approval, typ: str) -> str:
    """The args hash to sign: the one recomputed from the arguments shown. A request that cannot
    be approved (its arguments not strict JSON or not hashing to the gateway's hash, or the
    gateway says it could not read it whole: its ``damage`` field) is refused (``CliError``),
    unless this is a rejection."""
    mine, problem = recompute_hash(a)
    malformed = record_malformed(a)
    if typ == tokens.TYP_REJECTION and (problem or malformed):
        return _rejecting_unapprovable(a, problem or f"the gateway could not read it whole: {malformed}")
    if malformed:
        raise CliError("request_malformed", f"refusing to sign: the gateway could not read this stored request "
                       f"whole ({malformed}); it may be rejected (toolgate approvals reject), not approved")
    if problem:
        raise CliError("args_hash_mismatch" if mine else "args_not_strict_json", f"refusing to sign: {problem}")
    return mine


def _rejecting_unapprovable(a: pb.Approval, problem: str) -> str:
    """The args hash to bind a rejection of a request that cannot be approved to: the gateway's
    (none can be recomputed from what is shown, or it differs). Says so on stderr first; a
    rejection can only refuse the call, so signing the hash the gateway holds is safe."""
    print(shown(f"NOTE  this request cannot be approved ({problem}); the rejection is bound to the "
                f"gateway's args hash {a.args_hash}, not one recomputed here"), file=sys.stderr)
    return a.args_hash


def _refusal_hints(exc: grpc.RpcError, lifetime: int) -> dict[str, str]:
    """What to print after the gateway's refusal of a signed token, by its code. The hint on
    ``invalid_approval`` only when the gateway did not say why (``UNEXPLAINED``): one that says
    (``the request is approved, not pending``) needs none."""
    hints = {"approval_lifetime_out_of_range": "sign again with a --lifetime within it, e.g. "
                                               f"--lifetime {ALWAYS_ACCEPTED}, which every gateway accepts"}
    said = gateway_refusal(exc)
    if said and said[1] in UNEXPLAINED:
        hints["invalid_approval"] = _invalid_approval_hint(lifetime)
    return hints


def _invalid_approval_hint(lifetime: int) -> str:
    """What to check when the gateway refused the token: it says only ``invalid approval`` (the
    reason goes to its audit log), and a token living longer than it allows is a likely reason."""
    too_long = (f"if its approvals.max_approval_lifetime_seconds is below this token's lifetime of {lifetime} s, "
                f"sign again with a shorter --lifetime, e.g. --lifetime {ALWAYS_ACCEPTED}, which every gateway "
                "accepts; else " if lifetime > ALWAYS_ACCEPTED else "")
    return (f"the gateway does not say why; {too_long}check that --key is the key the gateway has for you, "
            "that you are in a group that may approve it, and this machine's clock")


def _confirmed(verb: str) -> bool:
    print(f"{verb} this call with exactly these arguments? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except UnicodeDecodeError:  # not UTF-8: not a yes
        answer = ""
    if not sys.stdin.isatty():  # no echoed Enter ended the prompt's line: end it, so errors start their own
        print(file=sys.stderr)
    return answer.strip().lower() in ("y", "yes")


def _claims(ns: argparse.Namespace, a: pb.Approval, mine: str, typ: str, lifetime: int) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": ns.approver_id, "sub": a.approval_id, "aud": a.audience, "tool": a.tool, "args_hash": mine,
        "tenant": a.tenant, "run_id": a.run_id, "iat": now,
        "exp": max(now + 1, min(now + lifetime, a.expires_at.seconds)), "jti": str(uuid.uuid4()),
    }
    if typ == tokens.TYP_REJECTION:
        claims["reason"] = ns.reason
    return claims


def recompute_hash(a: pb.Approval) -> tuple[str, str]:
    """(my hash of the displayed arguments, problem or ""); no hash when they are not strict JSON."""
    args, problem = parsed_args(a)
    if args is None:
        return "", f"the arguments are not strict JSON: {problem}"
    mine = args_hash(args)
    if not hmac.compare_digest(mine.encode(), a.args_hash.encode()):
        return mine, f"the gateway's args hash {a.args_hash} is not the hash of the arguments shown ({mine})"
    return mine, ""


def _load_key(ns: argparse.Namespace) -> SigningKey:
    """The approver's signing key; ``CliError`` (exit 2) with what to do when it cannot be used."""
    pem = _read_key_file(ns.key)
    passphrase = _passphrase(ns.passphrase_env)
    labels = key_labels(pem)
    kid, approver = ns.kid or labels.get("kid", ""), ns.approver or labels.get("approver", "")
    if not kid or not approver:
        raise CliError("key_labels_missing", f"{ns.key} has no toolgate-kid/toolgate-approver lines: "
                       "pass --kid and --approver")
    ns.approver_id = approver
    return SigningKey(kid, _private_key(ns, pem, passphrase))


def _passphrase(var: str) -> bytes | None:
    """The passphrase in environment variable ``var`` (none when ``var`` is ""); an unset or
    empty variable is refused, never taken as an empty passphrase."""
    if not var:
        return None
    value = os.environ.get(var, "")
    if not value:
        raise CliError("passphrase_env_unset", f"environment variable {var} (--passphrase-env) is empty or unset: "
                       "export it, or drop --passphrase-env for a key without a passphrase")
    return value.encode()


def _private_key(ns: argparse.Namespace, pem: bytes, passphrase: bytes | None) -> Ed25519PrivateKey:
    """The key in ``pem``; whether it is encrypted is read from its PEM header, so a missing,
    needless or wrong passphrase each get their own code."""
    encrypted = pem_encrypted(pem)
    if encrypted and passphrase is None:
        raise CliError("key_passphrase_needed", f"{ns.key} is encrypted: pass --passphrase-env VAR")
    if passphrase is not None and not encrypted:
        raise CliError("key_not_encrypted", f"{ns.key} has no passphrase: drop --passphrase-env")
    try:
        return load_private_key(pem, passphrase)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        if encrypted:
            raise CliError("key_passphrase_wrong", f"cannot decrypt {ns.key}: wrong passphrase in "
                           f"{ns.passphrase_env} (or the file is damaged)") from exc
        raise CliError("key_invalid", f"{ns.key} is not an Ed25519 private key in PEM ({exc}): "
                       "make one with `toolgate keys new`") from exc


def _read_key_file(path: str) -> bytes:
    """The key file's bytes (``read_key_file``, which checks its mode on the file that is read);
    refused when its group or others may write it (whoever can write it can put their key in the
    approver's place), or read it while it is not encrypted (whoever can read it can sign as the
    approver)."""
    try:
        return read_key_file(path, encrypted_may_be_read=True)
    except KeyFileExposed as exc:
        if exc.owner is not None:
            raise CliError("key_file_writable", f"{path}: it is owned by uid {exc.owner}, not by you, and its owner "
                           f"may write it, so it cannot be trusted; {exc.remedy}") from None
        if exc.access == "write":
            raise CliError("key_file_writable", f"{path}: {exc.who} may write it (mode {exc.mode:o}), so it cannot "
                           f"be trusted; run chmod 600 {path}") from None
        raise CliError("key_file_readable", f"{path}: {exc.who} may read this unencrypted private key (mode "
                       f"{exc.mode:o}), so they could sign as you; run chmod 600 {path}, or use a key encrypted "
                       "with a passphrase (`toolgate keys new --passphrase-env VAR` makes one)") from None
    except FileNotFoundError:
        raise CliError("key_file_not_found", f"{path}: no such file (--key)") from None
    except OSError as exc:
        raise CliError("key_file_unreadable", f"{path}: cannot be read: {exc.strerror or exc}") from None


def _get(ns: argparse.Namespace) -> pb.Approval:
    return _stub(ns).Get(pb.GetApprovalRequest(approval_id=ns.approval_id), metadata=metadata(ns), timeout=ns.timeout)


def run_watch(ns: argparse.Namespace) -> int:
    request = pb.WatchApprovalsRequest(approval_id=ns.approval_id, include_current=ns.include_current)
    connection = channel(ns)
    try:
        for event in pb_grpc.ApprovalsStub(connection).Watch(request, metadata=metadata(ns), timeout=ns.timeout):
            print(json.dumps({"type": event.type, "approval": approval_dict(event.approval)}), flush=True)
            if ns.until and event.approval.status == ns.until:
                return 0
    except grpc.RpcError as exc:
        if exc.code() is not grpc.StatusCode.DEADLINE_EXCEEDED:
            return report_rpc_error(exc)
        if not _connected(connection):  # the time ran out before a gateway ever answered
            print(f"toolgate: unavailable: no gateway answered at {shown(ns.target)} within --timeout "
                  f"{ns.timeout:g}s (is the gateway running at --target?)", file=sys.stderr)
            return EXIT_TRANSPORT  # as for the status gRPC gives when it cannot connect at all
    if ns.until:  # a script waiting for that status must not go on as if it came
        return fail("watch_ended", f"no event with status {ns.until!r} within --timeout {ns.timeout:g}s "
                    "(raise --timeout, or check the status with `toolgate approvals show`)")
    return 0
