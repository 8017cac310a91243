"""``toolgate tools`` and ``toolgate call``: the agent's view of the gateway."""

from __future__ import annotations

import argparse
import json
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway._proto.toolgate.v1 import gateway_pb2_grpc as pb_grpc
from gateway.cli._client import add_target_options, channel, metadata, report_rpc_error
from gateway.terminal import json_text, shown

EXIT = {"ok": 0, "observation": 1, "refused": 3, "approval_required": 4, "evidence_required": 5}
MAX_STEP = 2**31 - 1
"""The largest ``--step``: ``ToolCallRequest.step`` is an int32."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tools", help="list the tools this caller may use",
                       description="List the tools the gateway lets this API key see (policy-filtered).")
    add_target_options(p)
    p.add_argument("--json", action="store_true", help="print JSON: name, description, schema, risk, labels")
    p.set_defaults(func=run_tools)

    p = sub.add_parser(
        "call", help="call a tool through the gateway",
        description="Call TOOL with JSON arguments and print the outcome as one JSON object with "
        "outcome (observation|refused|approval_required|evidence_required), code, decision_id, "
        "args_hash and the observation or reasons. Exit 0 only for an observation with status ok.",
    )
    p.add_argument("tool", help="the tool's name")
    p.add_argument("--args", default="{}", help="arguments as one JSON object (default {})")
    p.add_argument("--idempotency-key", default="", help="same key + same args returns the stored outcome")
    p.add_argument("--run-id", default="", help="the agent run this call belongs to")
    p.add_argument("--step", type=step_number, default=0, metavar="N",
                   help=f"the step within the run (0 to {MAX_STEP})")
    p.add_argument("--evidence", default="", help="evidence for policy as a JSON object")
    approved = p.add_mutually_exclusive_group()  # two ways to name one approval: give one
    approved.add_argument("--grant", default="", help="a grant token from an approved request")
    approved.add_argument("--approval-id", default="", help="retry an approved call: the gateway uses its grant")
    add_target_options(p)
    p.set_defaults(func=run_call)


def step_number(text: str) -> int:
    """``--step``: a whole number from 0 to ``MAX_STEP`` (argparse type)."""
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else -1
    if not 0 <= value <= MAX_STEP:
        raise argparse.ArgumentTypeError(f"{text[:24]!r} is not a whole number from 0 to {MAX_STEP}")
    return value


def run_tools(ns: argparse.Namespace) -> int:
    stub = pb_grpc.ToolGatewayStub(channel(ns))
    try:
        resp = stub.ListTools(pb.ListToolsRequest(), metadata=metadata(ns), timeout=ns.timeout)
    except grpc.RpcError as exc:
        return report_rpc_error(exc)
    if ns.json:
        tools = [
            {"name": t.name, "version": t.version, "description": t.description,
             "input_schema": json.loads(t.input_schema_json or "{}"),
             "risk": MessageToDict(t.risk, preserving_proto_field_name=True), "labels": list(t.labels)}
            for t in resp.tools
        ]
        print(json.dumps(tools, indent=2))
        return 0
    width = max((len(t.name) for t in resp.tools), default=4)
    for t in resp.tools:
        print(shown(f"{t.name:<{width}}  {t.risk.side_effect:<14} {t.description}"))
    return 0


def run_call(ns: argparse.Namespace) -> int:
    request = pb.ToolCallRequest(
        tool=ns.tool, args_json=ns.args.encode(), run_id=ns.run_id, step=ns.step,
        idempotency_key=ns.idempotency_key, evidence_json=ns.evidence.encode(),
        approval_grant=ns.grant, approval_id=ns.approval_id,
    )
    stub = pb_grpc.ToolGatewayStub(channel(ns))
    try:
        resp = stub.ExecuteTool(request, metadata=metadata(ns), timeout=ns.timeout)
    except grpc.RpcError as exc:
        return report_rpc_error(exc)
    out = response_to_dict(resp)
    print(json_text(out, indent=2))
    if out["outcome"] == "observation":
        return 0 if out["observation"]["status"] == "ok" else 1
    return EXIT.get(out["outcome"], 3)


def response_to_dict(resp: pb.ToolCallResponse) -> dict[str, Any]:
    kind = resp.WhichOneof("outcome") or "none"
    out: dict[str, Any] = {
        "outcome": kind, "code": resp.code, "decision_id": resp.decision_id,
        "args_hash": resp.args_hash, "policy_version": resp.policy_version, "replayed": resp.replayed,
    }
    body = MessageToDict(getattr(resp, kind), preserving_proto_field_name=True,
                         always_print_fields_with_no_presence=True) if kind != "none" else {}
    if kind == "observation":
        raw = body.pop("data_json", "")
        body["data"] = json.loads(resp.observation.data_json or b"null") if raw is not None else None
        body["duration_ms"] = int(resp.observation.duration_ms)
        out["observation"] = body
    else:
        out.update(body)
    return out
