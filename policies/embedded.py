"""The embedded engine: in-process Rego on regorus (PyPI ``gordon-to-regorus``).

Evaluation runs inline, on the caller's thread, inside the ``async`` methods: one eval of
the default bundle takes ~30 µs, far less than handing it to a worker thread would cost,
and with no ``await`` between setting the input and reading the result, two coroutines
cannot interleave on the one engine.

Timeouts, honestly: regorus cannot be interrupted from Python and does not release the
GIL, so nothing can stop an evaluation half-way. ``timeout_ms`` is enforced after the
fact: an evaluation that took longer is discarded and denies with ``policy_unavailable``,
so a slow policy never *allows* late, but it does hold the event loop while it runs.
Rego has no unbounded loops; what can be slow is a policy doing large comprehensions over
large data, which is a policy bug to catch in review and in ``toolgate policy test``. A
policy that needs a hard wall-clock bound belongs on the ``opa`` engine, whose HTTP call
is cancelled at the timeout.

Errors: any exception regorus raises during evaluation (type errors, conflicts, builtin
errors — regorus raises where OPA would leave a rule undefined), and a panic inside it (after
which the engine is replaced by a fresh copy of the loaded one) ⇒
``PolicyError("policy_unavailable")``; an undefined or malformed decision ⇒
``PolicyError("policy_invalid_decision")``. Both deny.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from policies._bundle import compile_bundle, describe_engine_error, read_bundle
from policies._divergence import divergences
from policies._decision import UNDEFINED, PolicyDecision, parse_decision, parse_decision_json, single_value
from policies._errors import POLICY_UNAVAILABLE, PolicyError
from policies._encode import encode_json
from policies._owned import OwnedEngine, free_strays, is_panic

DEFAULT_QUERY = "data.toolgate.decision"
_NOT_A_RULE = "not a valid rule path"
_UNDEFINED_JSON = '"<undefined>"'


class EmbeddedEngine:
    """A bundle folder compiled into regorus; ``reload()`` swaps in a fresh compile."""

    inline = True
    """``evaluate`` never awaits: callers cannot time it out and need not try (see above)."""

    def __init__(self, path: Path, *, query: str = DEFAULT_QUERY, timeout_ms: int = 500) -> None:
        """Load the bundle at ``path``; raises ``PolicyLoadError`` if it does not load."""
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
        self._path = Path(path)
        self._query = query
        self._timeout_s = timeout_ms / 1000
        self._engine, self._version = self._build()
        self._rule_paths: dict[str, bool] = {}  # path -> is a rule (learnt on first evaluation)

    @classmethod
    def from_bundle(cls, path: Path, query: str = DEFAULT_QUERY, timeout_ms: int = 500) -> EmbeddedEngine:
        """Load the bundle at ``path``; raises ``PolicyLoadError`` if it does not load."""
        return cls(path, query=query, timeout_ms=timeout_ms)

    @property
    def version(self) -> str:
        """``sha256:<16 hex>`` over the sorted policy sources and data of the serving bundle."""
        return self._version

    def divergences(self) -> list[str]:
        """The serving bundle's builtin calls whose answers may differ from OPA's
        (``policies._divergence``): ``file:line: name: how``."""
        return divergences(json.loads(self._engine.engine.get_ast_as_json()))

    async def evaluate(self, input: dict[str, Any]) -> PolicyDecision:
        """The decision for ``input``; raises ``PolicyError`` (see the module docstring)."""
        return self.evaluate_sync(input)

    async def query(self, path: str, input: dict[str, Any]) -> Any:
        """The value at ``path`` or ``UNDEFINED``; raises ``PolicyError`` on engine errors."""
        text = self._eval(path, input)
        return UNDEFINED if text is None else json.loads(text)

    def evaluate_sync(self, input: dict[str, Any]) -> PolicyDecision:
        """``evaluate`` for synchronous callers (CLI, benchmarks, replay)."""
        text = self._eval(self._query, input)
        return parse_decision(UNDEFINED) if text is None else parse_decision_json(text)

    async def reload(self) -> None:
        """Recompile the bundle; on ``PolicyLoadError`` the old policy keeps serving. The files
        are read in a thread; the compile (~5 ms for the default bundle) stays on the loop's
        thread, where the engine is used and freed (``close``)."""
        bundle = await asyncio.to_thread(read_bundle, self._path)
        self._engine, self._version = compile_bundle(bundle), bundle.version
        self._rule_paths = {}

    async def close(self) -> None:
        """Drop the compiled engine here, on the loop's thread.

        A regorus ``Engine`` may only be freed on the thread that made it: left to the cyclic
        garbage collector it can be collected on any thread (a metrics exporter's, say), where
        pyo3 refuses to free it and leaks it. After ``close`` every evaluation denies.
        """
        self._engine = None  # type: ignore[assignment]
        free_strays()

    def _build(self) -> tuple[OwnedEngine, str]:
        bundle = read_bundle(self._path)
        return compile_bundle(bundle), bundle.version

    def _eval(self, path: str, input: dict[str, Any]) -> str | None:
        """The JSON text of the value at ``path``, ``None`` when it is undefined."""
        owned = self._engine  # never the bare engine in a frame a traceback may keep (``policies._owned``)
        free_strays()
        started = time.perf_counter()
        try:
            text = encode_json(input).decode()
        except (TypeError, ValueError, RecursionError) as exc:
            raise PolicyError(POLICY_UNAVAILABLE, f"input is not JSON-serialisable: {exc}") from exc
        try:
            owned.engine.set_input_json(text)
            value = self._value(owned, path)
        except Exception as exc:  # regorus raises RuntimeError for every evaluation error
            raise PolicyError(POLICY_UNAVAILABLE, describe_engine_error(exc)) from exc
        except BaseException as exc:
            if not is_panic(exc):
                raise
            if self._engine is owned:  # its state is broken: the next evaluation gets a fresh engine
                self._engine = owned.renewed()
            raise PolicyError(POLICY_UNAVAILABLE, f"the engine panicked: {str(exc)[:300]}") from None
        elapsed = time.perf_counter() - started
        if elapsed > self._timeout_s:
            raise PolicyError(POLICY_UNAVAILABLE, f"evaluation took {elapsed * 1000:.1f} ms, over the timeout")
        return value

    def _value(self, owned: OwnedEngine, path: str) -> str | None:
        """A rule's value by ``eval_rule`` (~15 µs cheaper than a query), else by query.

        ``eval_rule_as_json`` answers an undefined rule with the JSON string
        ``"<undefined>"``; a rule whose value is that very string reads as undefined too,
        which no caller can tell apart from a wrong decision anyway (both deny). A path
        that is not a rule (a package, a data document) is evaluated as a query; which
        kind a path is, is learnt on its first evaluation.
        """
        if self._rule_paths.get(path, True):
            try:
                raw = owned.engine.eval_rule_as_json(path)
            except RuntimeError as exc:
                if _NOT_A_RULE not in str(exc):
                    raise
                self._rule_paths[path] = False
            else:
                self._rule_paths[path] = True
                return None if raw == _UNDEFINED_JSON else raw
        value = single_value(json.loads(owned.engine.eval_query_as_json(path)).get("result", []))
        return None if value is UNDEFINED else json.dumps(value)  # rare: a package or data path
