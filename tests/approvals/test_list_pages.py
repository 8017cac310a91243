"""``Approvals.List`` in pages: each request may hold arguments up to ``limits.max_args_bytes``
(256 KiB), and the 500 newest were sent in one response, which a client refuses past gRPC's
default 4 MiB, so ``approvals list`` failed (RESOURCE_EXHAUSTED) once a tenant had some 16
large requests. A response now stops before 3 MiB with a token for the next page; the CLI
follows the tokens."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import grpc
import pytest

from gateway._proto.toolgate.v1 import gateway_pb2 as pb
from gateway.approvals.servicer import LIST_BYTES
from tests.approvals.approval_helpers import APPROVER, ROOT, serving, write_config

BIG = 200 * 1024
MADE = 24


async def _requests(c, n: int) -> list[str]:
    made = []
    for i in range(n):
        args = json.dumps({"n": i, "path": f"{i:03d}-" + "x" * BIG})
        resp = await c.call("count_write", args)
        assert resp.code == "approval_required", resp
        made.append(resp.approval_required.approval_id)
    return made[::-1]  # newest first


async def _cli(address: str, *argv: str) -> tuple[int, str, str]:
    env = {**os.environ, "TOOLGATE_TARGET": address, "TOOLGATE_API_KEY": APPROVER["alice"]}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli", "approvals", "list", *argv,
                                                env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_large_requests_are_listed_page_by_page(tmp_path):
    async with serving(write_config(tmp_path)) as (running, c):
        made = await _requests(c, MADE)
        md, seen, token, pages = c.md(APPROVER["alice"]), [], "", 0
        while True:
            resp = await c.approvals.List(pb.ListApprovalsRequest(page_token=token), metadata=md, timeout=10)
            assert resp.ByteSize() <= LIST_BYTES + 64 and resp.approvals
            seen += [a.approval_id for a in resp.approvals]
            assert all(len(a.args_json) > BIG for a in resp.approvals)  # whole, not cut
            pages, token = pages + 1, resp.next_page_token
            if not token:
                break
        assert seen == made and pages >= 2

        small = await c.approvals.List(pb.ListApprovalsRequest(page_size=5), metadata=md, timeout=10)
        assert [a.approval_id for a in small.approvals] == made[:5] and small.next_page_token

        rc, out, err = await _cli(running.address, "--json", "--limit", "0")
        assert rc == 0, err
        assert [a["approval_id"] for a in json.loads(out)] == made
        rc, out, err = await _cli(running.address, "--limit", "3")
        assert rc == 0, err
        assert [line.split()[0] for line in out.splitlines()] == made[:3]


@pytest.mark.parametrize("request_fields, detail", [
    ({"page_token": "bm9wZQ"}, "page_token is not one this gateway gave"),  # base64url of "nope"
    ({"page_token": "%%%"}, "page_token is not one this gateway gave"),
    ({"page_size": 501}, "page_size 501 is out of range"),
    ({"page_size": -1}, "page_size -1 is out of range"),
])
async def test_a_bad_page_is_refused_with_a_message(tmp_path, request_fields, detail):
    async with serving(write_config(tmp_path)) as (_, c):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.approvals.List(pb.ListApprovalsRequest(**request_fields), metadata=c.md(APPROVER["alice"]),
                                   timeout=10)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert detail in refused.value.details() and "invalid_arguments" in refused.value.details()


async def test_the_cli_refuses_a_negative_limit(tmp_path):
    rc, _, err = await _cli("127.0.0.1:1", "--limit", "-2")
    assert rc == 2 and "not a whole number" in err
