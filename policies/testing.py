"""Running ``*_test.rego`` the way ``opa test`` does.

Every ``.rego`` file under the folder is loaded (tests included) with its data files; every
rule named ``test_*`` in every package is evaluated on its own with no input. A test passes
when its value is ``true``, fails when it is undefined or anything else, and errors when
evaluation raises. ``engine="opa"`` runs the same folder through the real ``opa test``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from policies._bundle import compile_bundle, describe_engine_error, read_bundle

OPA_VERSION = "v1.22.0"


@dataclass(frozen=True, slots=True)
class TestResult:
    """The outcome of one ``test_*`` rule."""

    __test__ = False  # not a pytest test class

    name: str
    """The rule name, e.g. ``test_refund_small_allowed``."""
    package: str
    """The package, e.g. ``data.toolgate``."""
    file: str
    """The file that defines the rule."""
    passed: bool
    """True when the rule evaluated to ``true``."""
    error: str | None
    """The evaluation error, if the rule raised (then ``passed`` is False)."""
    duration: float
    """Seconds taken."""

    @property
    def status(self) -> Literal["PASS", "FAIL", "ERROR"]:
        return "PASS" if self.passed else "ERROR" if self.error else "FAIL"


def run_tests(path: Path, engine: Literal["embedded", "opa"] = "embedded") -> list[TestResult]:
    """Run every ``test_*`` rule under ``path``, sorted by file and line.

    Raises ``PolicyLoadError`` when the folder does not load (embedded), or when the
    ``opa`` binary cannot be found or its output cannot be read (opa).
    """
    if engine == "opa":
        return _run_opa(Path(path))
    if engine != "embedded":
        raise ValueError(f"unknown engine {engine!r}")
    regorus_engine = compile_bundle(read_bundle(Path(path), include_tests=True)).engine  # a CLI's one thread
    results = []
    for package, name, file in _test_rules(regorus_engine):
        results.append(_run_one(regorus_engine, package, name, file))
    return results


def _test_rules(engine) -> list[tuple[str, str, str]]:  # noqa: ANN001 - regorus.Engine
    """(package, rule name, file) of every distinct ``test_*`` rule, in source order."""
    seen: dict[tuple[str, str], tuple[str, int]] = {}
    for module in json.loads(engine.get_ast_as_json()):
        ast = module["ast"]
        package = "data." + _dotted(ast["package"]["refr"])
        for rule in ast.get("rules", []):
            head = (rule.get("Spec") or {}).get("head") or {}
            kind = next(iter(head), None)
            if kind not in ("Compr", "Set", "Func"):
                continue
            name = _dotted(head[kind].get("refr"))
            if kind != "Func" and name.startswith("test_"):
                line = head[kind]["span"]["line"]
                seen.setdefault((package, name), (module["source"]["file"], line))
    ordered = sorted(seen.items(), key=lambda item: item[1])
    return [(package, name, file) for (package, name), (file, _line) in ordered]


def _run_one(engine, package: str, name: str, file: str) -> TestResult:  # noqa: ANN001
    started = time.perf_counter()
    try:
        engine.set_input_json("{}")
        value = json.loads(engine.eval_rule_as_json(f"{package}.{name}"))
        passed, error = value is True, None
    except Exception as exc:  # regorus raises RuntimeError for evaluation errors
        passed, error = False, describe_engine_error(exc)
    return TestResult(name, package, file, passed, error, time.perf_counter() - started)


def _dotted(ref) -> str:  # noqa: ANN001 - an AST ref node
    if "Var" in ref:
        return ref["Var"]["value"]
    if "RefDot" in ref:
        return f"{_dotted(ref['RefDot']['refr'])}.{ref['RefDot']['field'][1]}"
    raise ValueError(f"unsupported reference in AST: {next(iter(ref))}")


def opa_binary() -> Path | None:
    """The OPA binary: ``$TOOLGATE_OPA``, else the Makefile's cache, else ``opa`` on PATH."""
    env = os.environ.get("TOOLGATE_OPA")
    if env:
        return Path(env) if Path(env).exists() else None
    cached = Path.home() / ".cache" / "toolgate" / f"opa-{OPA_VERSION}" / "opa"
    if cached.exists():
        return cached
    found = shutil.which("opa")
    return Path(found) if found else None




def _run_opa(path: Path) -> list[TestResult]:
    from policies._errors import PolicyLoadError

    binary = opa_binary()
    if binary is None:
        raise PolicyLoadError("no opa binary: set TOOLGATE_OPA or run `make opa`")
    proc = subprocess.run(
        [str(binary), "test", "--format", "json", str(path)], capture_output=True, text=True, timeout=300
    )
    try:
        records = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise PolicyLoadError(f"opa test failed: {proc.stderr.strip() or proc.stdout.strip()}") from exc
    return [_opa_result(record) for record in records]


def _opa_result(record: dict) -> TestResult:
    error = record.get("error")
    return TestResult(
        name=record["name"],
        package=record["package"],
        file=record.get("location", {}).get("file", ""),
        passed=not record.get("fail") and not error,
        error=json.dumps(error) if error else None,
        duration=record.get("duration", 0) / 1e9,
    )
