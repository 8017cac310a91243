"""A file credential's folder is removed whatever the tool left in it, a folder of its own (with
files) and a read-only one included, and the call's result stands: the cleanup raised on the first
folder it met (IsADirectoryError), leaving the credential file on disk and ending the call in error."""

from __future__ import annotations

import os
import sys

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
