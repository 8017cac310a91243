"""Writing a policy bundle for a test, and asking the pinned OPA's ``opa check`` about it: the
oracle the embedded engine's load-time refusals are held to."""

from __future__ import annotations

import re
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


def opa_errors(opa_binary: Path, folder: Path) -> dict[str, list[tuple[str, str]]]:
    """File name (``c<N>.rego``) -> OPA's (code, message) for it, for a folder of such files. OPA stops
    at the first compile stage with errors, so each round drops the files it reported and checks
    the rest again."""
    errors: dict[str, list[tuple[str, str]]] = {}
    while True:
        out = opa_check(opa_binary, folder, "--max-errors", "-1", timeout=120)
        found: dict[str, list[tuple[str, str]]] = {}
        for line in (out.stdout + out.stderr).splitlines():
            hit = re.search(r"/(c\d+\.rego):\d+: (\w+): (.*)", line)
            if hit:
                found.setdefault(hit[1], []).append((hit[2], hit[3]))
        if not found:
            assert out.returncode == 0, out.stdout + out.stderr
            return errors
        errors.update(found)
        for name in found:
            (folder / name).unlink()
