"""A file credential's folder is removed whatever the tool left in it, a folder of its own (with
files) and a read-only one included, and the call's result stands: the cleanup raised on the first
folder it met (IsADirectoryError), leaving the credential file on disk and ending the call in error."""

from __future__ import annotations

import os
import stat
import sys

import structlog

from gateway.credentials import ResolvedCredentials, credential_files
from gateway.executors.subprocess import SubprocessExecutor

SECRET = "kube-token-9f8e7d6c5b4a"
LITTER = """
import os, sys
folder = os.path.dirname(sys.argv[1])
os.makedirs(os.path.join(folder, "cache", "deeper"))
open(os.path.join(folder, "cache", "deeper", "entry"), "w").write("x")
os.makedirs(os.path.join(folder, "sealed"))
open(os.path.join(folder, "sealed", "inside"), "w").write("x")
os.chmod(os.path.join(folder, "sealed"), 0o500)
print(folder)
"""


def _creds() -> ResolvedCredentials:
    return ResolvedCredentials(files={"kubeconfig": SECRET}, secret_values=frozenset({SECRET}))


def test_the_folder_goes_with_what_was_put_in_it():
    with credential_files(_creds()) as paths:
        folder = os.path.dirname(paths["kubeconfig"])
        os.makedirs(os.path.join(folder, "cache", "deeper"))
        open(os.path.join(folder, "cache", "deeper", "entry"), "w").close()
        os.chmod(os.path.join(folder, "cache"), 0o500)
    assert not os.path.lexists(folder)


async def test_a_tool_that_litters_its_credential_folder_still_gets_its_result(make_tool, make_request, tmp_path):
    tool = make_tool("cmd", executor={"kind": "subprocess", "argv": [sys.executable, "-c", LITTER, "{file:kubeconfig}"]},
                     credentials=[{"secret": "kube", "inject": "file", "name": "kubeconfig"}])
    (tmp_path / "sandbox" / "cmd").mkdir(parents=True)
    result = await SubprocessExecutor().execute(make_request(tool, credentials=_creds()))
    assert result.ok, result
    folder = result.data["stdout"].strip()
    assert folder and not os.path.lexists(folder), f"{folder} left on disk"


def test_a_folder_swapped_for_a_link_changes_nothing_outside_it(tmp_path):
    """A tool that puts a link in its credential folder's place: nothing the link points to, and
    not the folder's parent (the system's temp folder), has its mode changed; it is logged."""
    parent, target = tmp_path / "tmp", tmp_path / "elsewhere"
    parent.mkdir()
    target.mkdir()
    parent.chmod(0o1777)
    target.chmod(0o755)
    with structlog.testing.capture_logs() as logs:
        with credential_files(_creds(), parent=parent) as paths:
            folder = os.path.dirname(paths["kubeconfig"])
            os.rename(folder, tmp_path / "moved")
            os.symlink(target, folder)
    assert stat.S_IMODE(parent.stat().st_mode) == 0o1777 and stat.S_IMODE(target.stat().st_mode) == 0o755
    assert [e["event"] for e in logs] == ["credential_files_not_removed"]


def test_a_folder_that_cannot_be_listed_is_made_listable_and_removed(monkeypatch):
    """rmtree's handler is also called for a listing or an open that failed (a folder the tool made
    000, as a user other than root meets it; the refusal injected): no exception, all removed.
    The handler retried those calls as removals: os.open(path) raised TypeError out of the call."""
    opened, refused = os.open, []

    def once_refused(path, *args, **kwargs):
        if os.path.basename(str(path)) == "sealed" and not refused:
            refused.append(path)
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    with credential_files(_creds()) as paths:
        folder = os.path.dirname(paths["kubeconfig"])
        os.makedirs(os.path.join(folder, "sealed", "inner"))
        monkeypatch.setattr(os, "open", once_refused)
    assert refused and not os.path.lexists(folder)
