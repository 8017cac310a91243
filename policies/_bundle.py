"""Reading a policy bundle folder and compiling it into a regorus engine.

A bundle is a folder of ``.rego`` files (searched recursively) and ``data.json`` /
``data.yaml`` files. As with ``opa run DIR``, a data file in ``DIR/a/b/`` is mounted at
``data.a.b``. Hidden files and folders (``.name``) are ignored.

regorus resolves function calls lazily, during evaluation, so a policy calling a builtin
regorus lacks would load fine and then fail on the first call that reaches it. We refuse
such a bundle at load time instead: every call site in the AST is probed once against an
empty engine and a missing builtin raises ``PolicyLoadError`` naming it. Unsafe variables
are likewise found only when regorus first evaluates; ``check_variables`` makes that happen
at load time. Variables only under ``not`` regorus never refuses (``policies._negation``), nor
unbound ones in what a rule produces (``policies._heads``), nor body variables only declared or
compared, nor ``some`` variables nothing uses (``policies._bodies``), nor rules that depend on
themselves (``policies._recursion``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import regorus
import yaml

from policies._ast import builtin_calls
from policies._bodies import unsafe_bodies
from policies._conflicts import conflicts
from policies._errors import PolicyLoadError
from policies._heads import unsafe_heads
from policies._negation import unsafe_negations
from policies._owned import OwnedEngine, free_strays
from policies._recursion import recursive_rules

_DATA_NAMES = {"data.json", "data.yaml", "data.yml"}
_MISSING_FN = "could not find function"
_POSITION = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)")
_MESSAGE = re.compile(r"^(?:error|warning):\s*(?P<msg>.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Bundle:
    """The files of a bundle, read once: what the engine loads and what the version hashes."""

    root: Path
    sources: tuple[tuple[Path, str], ...]
    """(path, text) of every policy file, sorted by path."""
    data: dict[str, Any]
    """All data files merged at their mount points."""
    data_files: tuple[tuple[Path, str], ...]
    """(path, text) of every data file, for the version hash."""

    @property
    def version(self) -> str:
        """``sha256:<first 16 hex>`` over the relative paths and texts of all files."""
        digest = hashlib.sha256()
        for path, text in sorted(self.sources + self.data_files):
            digest.update(self._rel(path).encode() + b"\0" + text.encode() + b"\0")
        return "sha256:" + digest.hexdigest()[:16]

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() if path != self.root else path.name


def read_bundle(path: Path, *, include_tests: bool = False) -> Bundle:
    """Read the policy and data files under ``path`` (a folder or one ``.rego`` file).

    Raises ``PolicyLoadError`` when the path does not exist, holds no policy file, or a
    data file is not valid JSON/YAML, not an object, or collides with another.
    """
    path = Path(path)
    if not path.exists():
        raise PolicyLoadError(f"{path}: no such policy bundle")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p, path))
    sources = tuple(
        (p, _read(p)) for p in files if p.suffix == ".rego" and (include_tests or not p.name.endswith("_test.rego"))
    )
    if not sources:
        raise PolicyLoadError(f"{path}: no .rego policy files")
    data_files = tuple((p, _read(p)) for p in files if p.name in _DATA_NAMES)
    data: dict[str, Any] = {}
    root = path if path.is_dir() else path.parent
    for file, text in data_files:
        _mount(data, file.parent.relative_to(root).parts, _parse_data(file, text), file)
    return Bundle(root=root, sources=sources, data=data, data_files=data_files)


def compile_bundle(bundle: Bundle) -> OwnedEngine:
    """A regorus engine with the bundle's policies and data loaded and checked, held for this
    thread (``policies._owned``: no frame here keeps the bare engine).

    Raises ``PolicyLoadError`` (file:line: message) on a parse error, on definitions OPA would
    refuse to compile together (``policies._conflicts``), naming the builtin when the policy
    calls one regorus does not implement, and on a variable OPA would call unsafe or assigned
    twice (``check_variables``), or that appears only under ``not`` (``policies._negation``), or
    that nothing binds in a rule's head, an ``else``'s value, a function's value or arguments, a
    comprehension's term or a default (``policies._heads``), or in a body, or a ``some``/``every``
    variable nothing uses (``policies._bodies``), and on a rule or function that depends on itself
    (``policies._recursion``).
    """
    free_strays()
    owned = OwnedEngine()
    for file, text in bundle.sources:
        try:
            owned.engine.add_policy(str(file), text)
        except Exception as exc:  # regorus raises RuntimeError with a rendered message
            raise PolicyLoadError(describe_engine_error(exc, fallback=str(file))) from exc
    if bundle.data:
        try:
            owned.engine.add_data_json(json.dumps(bundle.data))
        except Exception as exc:
            raise PolicyLoadError(f"{bundle.root}: data rejected: {describe_engine_error(exc)}") from exc
    modules = json.loads(owned.engine.get_ast_as_json())
    for problem in conflicts(modules, bundle.data):  # what OPA refuses to compile is refused here too
        raise PolicyLoadError(problem)
    check_builtins(owned, modules)
    check_variables(owned)
    for problem in unsafe_negations(modules):  # regorus would evaluate ``not p[x]`` as false
        raise PolicyLoadError(problem)
    for problem in unsafe_heads(modules):  # regorus would fail every evaluation reaching ``p := x``
        raise PolicyLoadError(problem)
    for problem in unsafe_bodies(modules):  # regorus would evaluate ``some x; x == 1`` as undefined
        raise PolicyLoadError(problem)
    for problem in recursive_rules(modules):  # regorus would fail every evaluation reaching the cycle
        raise PolicyLoadError(problem)
    owned.seal()
    return owned


def check_builtins(owned: OwnedEngine, modules: list[dict[str, Any]] | None = None) -> None:
    """Raise ``PolicyLoadError`` if any call site names a function regorus does not have
    (``modules``: the engine's AST, when already read)."""
    if modules is None:
        modules = json.loads(owned.engine.get_ast_as_json())
    for module, name, call in builtin_calls(modules):
        arity, line = len(call.get("params") or []), call["span"]["line"]
        if not _builtin_exists(name, arity):
            raise PolicyLoadError(
                f"{module['source']['file']}:{line}: builtin {name} is not implemented by the embedded "
                f"engine (regorus); rewrite the rule without it or set policy.engine: opa"
            )


def check_variables(owned: OwnedEngine) -> None:
    """Raise ``PolicyLoadError`` if a rule body uses a variable nothing binds, or assigns one twice.

    regorus finds these when it first evaluates anything, not when it loads a policy, and then
    fails every evaluation (every call denied, ``policy_unavailable``) where OPA refuses the
    bundle at compile time (``rego_unsafe_var_error``, ``var x assigned above``). A trivial query
    runs that analysis over every module now, without evaluating any rule. It looks at bodies
    only, and takes ``some x`` for a binding and leaves ``not`` alone: for heads, ``else`` values,
    arguments and comprehension terms see ``policies._heads``, for variables under ``not``,
    those only declared or compared and recursion ``policies._negation``, ``policies._bodies`` and
    ``policies._recursion``. OPA still refuses more (type errors, a variable used before its
    declaration): regorus fails closed on those when a call reaches them.
    """
    try:
        owned.engine.eval_query("true")
    except Exception as exc:  # regorus raises RuntimeError with a rendered message
        raise PolicyLoadError(describe_engine_error(exc)) from exc


def describe_engine_error(exc: BaseException, fallback: str = "") -> str:
    """A one-line ``file:line:col: message`` from a regorus error (no Rust backtrace)."""
    text = str(exc).split("Stack backtrace:")[0]
    position = _POSITION.search(text)
    message = _MESSAGE.search(text)
    msg = message.group("msg").strip() if message else (text.strip().splitlines() or ["unknown error"])[0]
    if position:
        return f"{position['file']}:{position['line']}:{position['col']}: {msg}"
    return f"{fallback}: {msg}" if fallback else msg


@cache
def _builtin_exists(name: str, arity: int) -> bool:
    probe = regorus.Engine()
    args = ", ".join(["null"] * arity)
    probe.add_policy("probe.rego", f"package toolgate_probe\nimport rego.v1\np if {{ x := {name}({args}); x == x }}\n")
    try:
        probe.eval_rule_as_json("data.toolgate_probe.p")
    except Exception as exc:
        return _MISSING_FN not in str(exc)
    return True


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyLoadError(f"{path}: cannot read: {exc}") from exc


def _parse_data(path: Path, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PolicyLoadError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from exc
    if value is None and path.suffix != ".json":
        return {}
    if not isinstance(value, dict):
        raise PolicyLoadError(f"{path}: the top level of a data file must be an object")
    return value


def _mount(data: dict[str, Any], parts: tuple[str, ...], value: dict[str, Any], file: Path) -> None:
    node = data
    for part in parts:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise PolicyLoadError(f"{file}: data path {'.'.join(parts)} collides with another data file")
    for key, item in value.items():
        if key in node:
            raise PolicyLoadError(f"{file}: data key {'.'.join((*parts, key))} is defined twice")
        node[key] = item
