"""How ``toolgate approvals`` shows a request: as JSON (``approval_dict``) or as the text an
approver reads before signing (``describe``).

What a request shows comes from the agent (run id, arguments) or from policy (reasons), so
every field is printed with control and format characters escaped (``gateway.terminal.shown``).
Arguments that are not strict JSON are shown as received, escaped, and marked MALFORMED; so is
a request the gateway could not read whole: it says so in the ``damage`` field (never in a
reason's text, which a policy chooses).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals.malformed import MALFORMED_REASON
from gateway.arguments import ArgumentsError, parse_strict
from gateway.terminal import shown

MAX_ARGS = 16 * 1024 * 1024


def record_malformed(a: pb.Approval) -> str:
    """What the gateway found wrong with the stored request when it could not read it whole
    (its ``damage`` field, ``<field>: <problem>``); "" for a request read whole."""
    return a.damage


def policy_reasons(a: pb.Approval) -> list[str]:
    """The policy's reasons: without the mark the gateway adds as the last reason of a damaged
    request for older clients (``MALFORMED_REASON`` + its ``damage``; shown on a line of its own).
    Only that exact mark, only when ``damage`` says the request is damaged: a reason of the
    policy's that merely starts like the mark is the policy's, and shown."""
    reasons = list(a.reasons)
    if a.damage and reasons and reasons[-1] == MALFORMED_REASON + a.damage:
        reasons.pop()
    return reasons


def parsed_args(a: pb.Approval) -> tuple[dict[str, Any] | None, str]:
    """(the request's arguments, "") when they are strict JSON (numbers as hashed), else (None,
    why not). Only those can be shown exactly (``json.loads`` would keep the last of two equal
    keys, say), so only those are shown as JSON or signed; the others are shown escaped, marked."""
    try:
        return parse_strict(a.args_json, max_bytes=MAX_ARGS), ""
    except ArgumentsError as exc:
        return None, str(exc)


def raw_args(a: pb.Approval) -> str:
    """Malformed arguments as received, in ASCII: a character beyond it as ``\\uXXXX`` (or
    ``\\UXXXXXXXX``), a byte that is not UTF-8 as ``\\xNN``."""
    text = a.args_json.decode("utf-8", "backslashreplace")
    return "".join(c if c.isascii() else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in text)


def list_line(a: pb.Approval) -> str:
    """One line of ``approvals list``, marked MALFORMED-RECORD or MALFORMED-ARGS when so."""
    malformed = "  MALFORMED-RECORD" if record_malformed(a) else ""
    malformed = malformed or ("  MALFORMED-ARGS" if parsed_args(a)[0] is None else "")
    return shown(f"{a.approval_id}  {a.status:<9} {a.tool:<16} agent={a.agent} groups={','.join(a.groups_any)} "
                 f"quorum={len(a.approvers)}/{a.quorum} expires={when(a.expires_at.seconds)}{malformed}")


def approval_dict(a: pb.Approval) -> dict[str, Any]:
    """The request as JSON. Arguments that are not strict JSON are ``args: null`` with
    ``args_malformed`` (why) and ``args_raw`` (as received, escaped: ``raw_args``); a request
    the gateway could not read whole has ``record_malformed`` (its ``damage``)."""
    args, problem = parsed_args(a)
    malformed = {"args_malformed": problem, "args_raw": raw_args(a)} if args is None else {}
    if record_malformed(a):
        malformed["record_malformed"] = record_malformed(a)
    return {
        "approval_id": a.approval_id, "status": a.status, "tenant": a.tenant, "agent": a.agent, "user": a.user,
        "run_id": a.run_id, "step": a.step, "tool": a.tool, "tool_version": a.tool_version,
        "args": args, **malformed, "args_hash": a.args_hash, "reasons": policy_reasons(a),
        "groups_any": list(a.groups_any), "quorum": a.quorum, "approvers": list(a.approvers),
        "risk": {"side_effect": a.risk.side_effect, "reversibility": a.risk.reversibility,
                 "data_sensitivity": a.risk.data_sensitivity},
        "created_at": iso(a.created_at.seconds), "expires_at": iso(a.expires_at.seconds),
        "rejection_reason": a.rejection_reason, "grant": a.grant, "decision_id": a.decision_id, "audience": a.audience,
    }


def describe(a: pb.Approval) -> str:
    """What an approver reads before signing. Non-ASCII is escaped so lookalikes show."""
    args, problem = parsed_args(a)
    arguments = shown(raw_args(a)) if args is None else json.dumps(args, indent=2, ensure_ascii=True, sort_keys=True)
    lines = [shown(line) for line in (
        f"approval   {a.approval_id}  [{a.status}]  gateway {a.audience}",
        f"tool       {a.tool} (version {a.tool_version})",
        f"risk       side_effect={a.risk.side_effect} reversibility={a.risk.reversibility} "
        f"data_sensitivity={a.risk.data_sensitivity}",
        f"requested  by agent {a.agent or '-'} for user {a.user or '-'} (tenant {a.tenant})",
        f"run        {quoted(a.run_id)} step {a.step}",  # the agent's own label: quoted, on its own line
        *[f"reason     {r}" for r in policy_reasons(a)],
        f"needs      {a.quorum} approver(s) from {', '.join(a.groups_any)}; so far: {', '.join(a.approvers) or 'none'}",
        f"expires    {iso(a.expires_at.seconds)} ({when(a.expires_at.seconds)})",
        f"args_hash  {a.args_hash}",
    )]
    if a.rejection_reason:
        lines.append(shown(f"rejected   {a.rejection_reason}"))
    if record_malformed(a):
        lines.append(shown(f"MALFORMED  the gateway could not read this stored request whole ({record_malformed(a)}): "
                           "what it could not read is blank; it may be rejected, not approved"))
    if args is None:
        lines.append(shown(f"MALFORMED  the arguments are not strict JSON ({problem}): shown as received, escaped, "
                           "on one line; they cannot be approved, only rejected"))
    elif not a.args_json.isascii():
        lines.append("WARNING    the arguments contain non-ASCII characters (shown escaped): check for lookalikes")
    return "\n".join(lines + ["arguments:", arguments])


def quoted(text: str) -> str:
    """``text`` in double quotes, its quotes and backslashes escaped: where a label the agent
    chose (spaces padding it to look like a line of its own, say) begins and ends stays visible."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def when(epoch: int) -> str:
    left = int(epoch - time.time())
    return f"in {left // 60}m {left % 60}s" if left > 0 else "expired"
