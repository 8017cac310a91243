"""Writing a policy bundle for a test, and asking the pinned OPA's ``opa check`` about it: the
oracle the embedded engine's load-time refusals are held to."""

from __future__ import annotations

import subprocess
from pathlib import Path


def write_bundle(folder: Path, files: dict[str, str]) -> Path:
    """``files`` (relative path -> text) written under ``folder``; ``folder``."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def opa_check(opa_binary: Path, folder: Path, *flags: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``opa check [flags] folder``: its exit status, and its errors on stdout/stderr."""
    return subprocess.run([str(opa_binary), "check", *flags, str(folder)], capture_output=True, text=True,
                          timeout=timeout)
