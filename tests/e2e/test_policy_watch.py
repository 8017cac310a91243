"""``policy.reload_on_change``: the watcher reloads a changed bundle once its files stop changing,
and outlives what goes wrong while it looks (a file gone between listing and reading it, an
editor's swap file). It died on that FileNotFoundError, silently, and from then on no edit of the
policy was ever loaded: an emergency deny-all kept being answered with allow."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from gateway.server import _watch_policy
from gateway.testing import start_gateway
from tests.conftest import Client, audit_records, demo_config, policy_bundle

HEADER = "package toolgate\n\n"
ALLOW = HEADER + 'decision := {"decision": "allow", "reasons": []}\n'
DENY = HEADER + 'decision := {"decision": "deny", "reasons": ["closed"]}\n'


async def _until(check, seconds: float = 10.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def test_a_changed_bundle_is_reloaded_and_a_vanishing_file_does_not_stop_the_watcher(tmp_path, monkeypatch):
    cfg = demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "bundle", ALLOW))})
    swap = cfg.policy_bundle_path / ".policy.rego.swp"
    swap.write_text("editor state")
    stat, looks = Path.stat, [0]

    def stat_of_a_file_just_deleted(path: Path, *args, **kwargs):
        """The swap file is there at every other look and gone at the next (the race, fault injected:
        seen when the folder is listed or checked, gone when its size is read)."""
        if path.name == swap.name:
            looks[0] += 1
            if looks[0] % 2 == 0:
                raise FileNotFoundError(2, "No such file or directory", str(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat_of_a_file_just_deleted)
    running = await start_gateway(cfg)
    client = Client(running.address)
    watcher = asyncio.create_task(_watch_policy(running.app, interval=0.05, settle=0.05))
    try:
        version = running.app.engine.version
        assert (await client.call("echo", "{}")).code == "ok"
        await asyncio.sleep(0.2)  # several looks at the folder, the swap file in each
        assert not watcher.done(), watcher
        (cfg.policy_bundle_path / "policy.rego").write_text(DENY)
        assert await _until(lambda: running.app.engine.version != version), "the change was never loaded"
        assert (await client.call("echo", "{}")).code == "policy_denied"
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await client.close()
        await running.stop()
    assert [r["code"] for r in audit_records(cfg.audit_path) if r["stage"] == "policy_reload"] == ["ok"]


async def test_a_bundle_still_being_written_is_loaded_once_it_settles(tmp_path):
    cfg = demo_config(tmp_path, policy={"bundle": str(policy_bundle(tmp_path / "bundle", ALLOW))})
    running = await start_gateway(cfg)
    watcher = asyncio.create_task(_watch_policy(running.app, interval=0.05, settle=0.3))
    try:
        for n in range(4):  # a deploy writing for a while: one reload, after the last write
            (cfg.policy_bundle_path / f"part{n}.rego").write_text(HEADER + f"part{n} := {n}\n")
            await asyncio.sleep(0.1)
        assert await _until(lambda: any(r["stage"] == "policy_reload" for r in audit_records(cfg.audit_path)))
        await asyncio.sleep(0.5)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await running.stop()
    assert [r["code"] for r in audit_records(cfg.audit_path) if r["stage"] == "policy_reload"] == ["ok"]


def test_a_folder_gone_while_it_is_walked_marks_the_stamp_and_raises_nothing(tmp_path, monkeypatch):
    """A subfolder removed while the bundle is walked (a deploy swapping ``..data`` versions; the
    walk's error injected): no exception (the first look ran outside the watcher's guard, so it
    ended the watcher before it began), and a stamp no whole look gives, so the next one reloads."""
    from gateway.server import bundle_stamp

    (tmp_path / "policy.rego").write_text(ALLOW)
    whole = bundle_stamp(tmp_path)

    def walk_cut_short(self, pattern):
        yield tmp_path / "policy.rego"
        raise FileNotFoundError(2, "No such file or directory", str(tmp_path / "..2026_old"))

    monkeypatch.setattr(Path, "rglob", walk_cut_short)
    partial = bundle_stamp(tmp_path)
    assert partial != whole and partial[0] == ("", -1, -1), partial
