"""A request whose stored arguments are damaged still reads: ``get_approval`` (and a resume)
learns its status, its ``args`` are ``{}`` and ``damage`` says what is wrong. The gateway sends
such arguments as stored, and the client raised ``TransportError`` (malformed response) on
them, so a paused run could never learn that the request was rejected. Real gateway (demo
config plus the counting write tool) on 127.0.0.1 port 0; the store's file damaged by hand."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

from runtime_client import AsyncGatewayClient, GatewayClient
from tests.approvals.approval_helpers import AGENT, serving, write_config


def damage(tmp_path, approval_id: str, args_json: str) -> None:
    """The stored request's ``args_json`` set to ``args_json`` (a lone surrogate written as its escape)."""
    with sqlite3.connect(tmp_path / "data" / "toolgate.db", timeout=10) as db:
        (text,) = db.execute("SELECT record FROM approvals WHERE approval_id=?", (approval_id,)).fetchone()
        raw = {**json.loads(text), "args_json": args_json}
        db.execute("UPDATE approvals SET record=? WHERE approval_id=?", (json.dumps(raw), approval_id))
    db.close()


@pytest.mark.parametrize("stored, args", [("{not json", {}), ("[1, 2]", {}), ("[" * 100_000, {}),
                                          ('{"path": "\ud800"}', {"path": "\ud800"})])
async def test_a_damaged_request_reads_with_its_damage_named(tmp_path, stored, args):
    async with serving(write_config(tmp_path)) as (running, c):
        resp = await c.call("count_write", '{"path": "out.txt", "n": 1}')
        approval_id = resp.approval_required.approval_id
        damage(tmp_path, approval_id, stored)
        async with AsyncGatewayClient(running.address, api_key=AGENT) as client:
            got = await client.get_approval(approval_id)
        assert (got.status, got.args, got.tool) == ("pending", args, "count_write")
        assert got.damage.startswith("args_json")


async def test_a_whole_request_has_no_damage(tmp_path):
    async with serving(write_config(tmp_path)) as (running, c):
        resp = await c.call("count_write", '{"path": "out.txt", "n": 1}')
        def get():
            with GatewayClient(running.address, api_key=AGENT) as client:
                return client.get_approval(resp.approval_required.approval_id)

        got = await asyncio.to_thread(get)  # blocking: off the loop the gateway serves on
        assert (got.args, got.damage) == ({"path": "out.txt", "n": 1}, "")
