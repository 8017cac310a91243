"""Tools the demo config uses, run by the python executor.

File tools work inside a workspace folder (``constraints.root``, relative to the data dir;
default ``workspace``); a path that resolves outside it (``..``, absolute, symlink) fails with
``path_outside_workspace``. The root itself must be the data dir's ``workspace`` folder or one
inside it (``root_outside_workspace`` otherwise): a root of ``"."`` would open the gateway's own
files (its audit log, its store) to the tool.
"""

from __future__ import annotations

import heapq
import json
import os
from pathlib import Path
from typing import Any

from gateway.executors.base import ExecRequest
from gateway.executors.python import ToolFailure

MAX_READ = 256 * 1024
"""Bytes of a file ``read_file`` returns at the most (``bytes`` says how large it is)."""
MAX_ENTRIES = 1000
"""Names ``list_dir`` returns at the most, the first in sorted order."""

POLICY_DOCS = {
    "refunds": "Refunds up to 100 are automatic; up to 1000 need one finance approval; up to 10000 need "
    "a ticket and two finance approvals; above that they are denied.",
    "writes": "Every write to the workspace needs one approval from the ops group.",
    "secrets": "Paths under secrets/ or containing .ssh, .env or id_rsa need a security approval.",
}


def _workspace(ctx: ExecRequest) -> Path:
    data = ctx.sandbox.parent.parent  # <data dir>/sandbox/<tool>
    allowed = (data / "workspace").resolve()
    root = (data / str(ctx.constraints.get("root", "workspace"))).resolve()  # an absolute root stays itself
    if os.path.commonpath([allowed, root]) != str(allowed):
        raise ToolFailure("root_outside_workspace",
                          f"constraints.root {ctx.constraints.get('root')!r} is outside the workspace folder")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _inside(ctx: ExecRequest, rel: str) -> Path:
    root = _workspace(ctx)
    target = (root / rel).resolve()
    if os.path.commonpath([root, target]) != str(root):
        raise ToolFailure("path_outside_workspace", f"{rel!r} is outside the workspace")
    return target


def read_file(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    path = _inside(ctx, args["path"])
    if not path.is_file():
        raise ToolFailure("not_found", f"no file {args['path']!r}")
    with open(path, "rb") as f:  # the first MAX_READ bytes only: a large file is never read whole
        data = f.read(MAX_READ)
        size = os.fstat(f.fileno()).st_size
    return {"path": args["path"], "content": data.decode("utf-8", errors="replace"), "bytes": size}


def list_dir(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    path = _inside(ctx, args.get("path", "."))
    if not path.is_dir():
        raise ToolFailure("not_found", f"no folder {args.get('path', '.')!r}")
    with os.scandir(path) as found:  # the first MAX_ENTRIES by name, never every name of a large folder held
        entries = heapq.nsmallest(MAX_ENTRIES, (e.name + ("/" if e.is_dir() else "") for e in found))
    return {"path": args.get("path", "."), "entries": entries}


def write_file(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    path = _inside(ctx, args["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(args["content"])
    return {"path": args["path"], "bytes_written": len(args["content"].encode())}


def delete_file(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    path = _inside(ctx, args["path"])
    path.unlink(missing_ok=True)
    return {"path": args["path"], "deleted": True}


def lookup_policy(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    topic = args["topic"]
    if topic not in POLICY_DOCS:
        raise ToolFailure("not_found", f"no policy document on {topic!r}; topics: {', '.join(POLICY_DOCS)}")
    return {"topic": topic, "text": POLICY_DOCS[topic]}


def refund(args: dict[str, Any], ctx: ExecRequest) -> dict[str, Any]:
    """Record a refund in the workspace ledger (stands in for a payments API)."""
    ledger = _workspace(ctx) / "refunds.jsonl"
    entry = {"order_id": args["order_id"], "amount": args["amount"], "currency": args.get("currency", "EUR")}
    with open(ledger, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return {"refunded": entry, "ledger_entries": sum(1 for _ in open(ledger))}
