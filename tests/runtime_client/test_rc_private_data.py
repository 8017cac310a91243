"""What a run keeps that others must not see: checkpoints (the goal, messages, tool outputs,
approval ids) in files that are the user's alone, whatever the umask; grants never in a repr."""

from __future__ import annotations

import os
import stat

from runtime_client import AgentState
from runtime_client._checkpoints import SQLiteCheckpoints


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_store_s_folder_and_files_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        store = SQLiteCheckpoints(tmp_path / "new" / "deeper" / "checkpoints.sqlite3")
        state = AgentState(goal="a goal with private details")
        store.save(state, [])
    finally:
        os.umask(old)
    assert _mode(tmp_path / "new") == 0o700 and _mode(tmp_path / "new" / "deeper") == 0o700
    files = sorted((tmp_path / "new" / "deeper").iterdir())
    assert files and all(_mode(f) == 0o600 for f in files), [(f.name, oct(_mode(f))) for f in files]
    assert store.load(state.run_id)[0].goal == "a goal with private details"


def test_an_existing_folder_is_left_as_it_is(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    SQLiteCheckpoints(shared / "c.sqlite3")
    assert _mode(shared) == 0o755 and _mode(shared / "c.sqlite3") == 0o600


def test_a_checkpoint_file_made_before_with_a_wider_mode_is_made_private(tmp_path):
    path = tmp_path / "c.sqlite3"
    SQLiteCheckpoints(path).save(AgentState(goal="g"), [])
    path.chmod(0o644)  # as an older version left it
    SQLiteCheckpoints(path)
    assert _mode(path) == 0o600


def test_a_grant_never_shows_in_a_printed_request_or_approval():
    from runtime_client._types import Approval, ExecuteRequest

    grant = "eyJhbGciOiJFZERTQSJ9.bearer-grant.sig"
    assert grant not in repr(ExecuteRequest("t", {}, approval_grant=grant))
    assert grant not in repr(Approval("apr-1", "approved", grant=grant))
    assert Approval("apr-1", "approved", grant=grant).grant == grant
