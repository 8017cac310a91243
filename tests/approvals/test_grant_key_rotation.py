"""Rotating the gateway's grant-signing key: list the new key first and keep the old one
behind it while grants it signed may still be presented; drop it and they stop verifying.

Three gateway runs over one data dir (real gRPC, real SQLite), as an operator would roll
the config: ``[old]`` → ``[new, old]`` → ``[new]``.
"""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from approval_helpers import AGENT, Clients, write_config
from gateway.approvals.keyring import write_private_key
from gateway.testing import calls_recorded, start_gateway

ARGS_A, ARGS_B, ARGS_C = '{"path": "a.txt", "n": 1}', '{"path": "b.txt", "n": 2}', '{"path": "c.txt", "n": 3}'


async def _run(tmp_path: Path, keys: list[Path], steps):
    running = await start_gateway(write_config(tmp_path, grant_keys=[str(k) for k in keys]))
    clients = Clients(running.address)
    try:
        return await steps(clients)
    finally:
        await clients.channel.close()
        await running.stop()


async def _grant(c: Clients, args: str) -> str:
    resp = await c.call("count_write", args)
    assert resp.code == "approval_required", resp
    a = await c.get(resp.approval_required.approval_id, AGENT)
    assert (await c.submit(a, "alice")).status == "approved"
    grant = (await c.get(a.approval_id, AGENT)).grant
    assert grant
    return grant


def _kid(grant: str) -> str:
    return jwt.get_unverified_header(grant)["kid"]


async def test_old_grants_verify_while_the_old_key_is_listed_and_stop_once_it_is_dropped(tmp_path: Path):
    old, new = tmp_path / "keys" / "grant-old.pem", tmp_path / "keys" / "grant-new.pem"
    old.parent.mkdir()

    async def before(c: Clients):
        return await _grant(c, ARGS_A), await _grant(c, ARGS_B)

    grant_a, grant_b = await _run(tmp_path, [old], before)  # the old key is generated on start
    assert _kid(grant_a) == _kid(grant_b)

    async def during(c: Clients):
        executed = await c.call("count_write", ARGS_A, approval_grant=grant_a)
        return executed, await _grant(c, ARGS_C)

    executed_a, grant_c = await _run(tmp_path, [new, old], during)  # the new key is generated, signs
    assert (executed_a.code, executed_a.replayed) == ("ok", False), executed_a
    assert _kid(grant_c) != _kid(grant_a)

    async def after(c: Clients):
        return (await c.call("count_write", ARGS_B, approval_grant=grant_b),
                await c.call("count_write", ARGS_C, approval_grant=grant_c))

    refused_b, executed_c = await _run(tmp_path, [new], after)
    assert refused_b.code == "invalid_approval", refused_b
    assert (executed_c.code, executed_c.replayed) == ("ok", False), executed_c
    assert calls_recorded(tmp_path / "data" / "sandbox", "count_write") == 2  # a and c; never b


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o602])
async def test_a_grant_key_others_may_read_or_write_does_not_load(tmp_path: Path, mode: int):
    """Whoever can read the gateway's grant key can sign grants (run any call as approved); whoever
    can write it can put their own in its place. The gateway refuses to start on it."""
    key = tmp_path / "keys" / "grant.pem"
    write_private_key(key, Ed25519PrivateKey.generate())
    key.chmod(mode)
    with pytest.raises(ValueError, match=rf"grant key .*grant.pem.*mode {mode:o}.*chmod 600"):
        await start_gateway(write_config(tmp_path, grant_keys=[str(key)]))


async def test_a_grant_key_its_group_may_only_read_loads(tmp_path: Path):
    """0640 (a key shared with the gateway's group, as a secret volume can mount it) is accepted."""
    key = tmp_path / "keys" / "grant.pem"
    write_private_key(key, Ed25519PrivateKey.generate())
    key.chmod(0o640)
    running = await start_gateway(write_config(tmp_path, grant_keys=[str(key)]))
    await running.stop()
