"""Writing a policy bundle for a test, and asking the pinned OPA's ``opa check`` about it: the
oracle the embedded engine's load-time refusals are held to."""

from __future__ import annotations

import json
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


RULES_HEADER = "package toolgate\nimport rego.v1\n"
DENY_BY_DEFAULT = 'default decision := {"decision": "deny", "reasons": ["no"]}\n'


def rules_text(rules: str, out: str | None = None) -> str:
    """A ``toolgate`` module of ``rules`` deciding deny, or allow when ``data.toolgate.out`` is
    ``out`` (a Rego term): the load-time refusal tests' one-file bundles."""
    allow = f'decision := {{"decision": "allow", "reasons": ["ok"]}} if data.toolgate.out == {out}\n' if out else ""
    return RULES_HEADER + rules + DENY_BY_DEFAULT + allow


def rules_bundle(folder: Path, rules: str, out: str | None = None) -> Path:
    """``rules_text`` written as ``p.rego`` in ``folder``; ``folder``."""
    return write_bundle(folder, {"p.rego": rules_text(rules, out)})


def opa_decides(opa_binary: Path, bundle: Path, input_file: Path, query: str = "data.toolgate.decision.decision") -> object:
    """What ``opa eval`` gives for ``query`` on ``bundle`` with the input in ``input_file``."""
    run = subprocess.run([str(opa_binary), "eval", "-f", "json", "-d", str(bundle), "-i", str(input_file), query],
                         capture_output=True, text=True, timeout=60)
    return json.loads(run.stdout)["result"][0]["expressions"][0]["value"]
