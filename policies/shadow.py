"""Shadow mode: evaluate a candidate policy beside the enforced one, log differences.

The enforced engine decides; its result (or its ``PolicyError``) is returned unchanged.
The candidate is evaluated on the same input after it, and whatever it does — a different
decision, a ``PolicyError``, any other exception — is only logged (structlog event
``policy_shadow_difference``) and counted in ``differences``. Nothing the candidate does
reaches the caller. Both decisions are compared on their policy content (``model_dump``),
so engine-only metadata such as OPA's decision id is not a difference.
"""

from __future__ import annotations

from typing import Any

import structlog

from policies._decision import PolicyDecision
from policies._errors import PolicyError
from policies._protocol import PolicyEngine

log = structlog.get_logger("toolgate.policy.shadow")


class ShadowEngine:
    """Enforces ``enforced``; evaluates ``candidate`` on every call for comparison only."""

    def __init__(self, enforced: PolicyEngine, candidate: PolicyEngine) -> None:
        self.enforced = enforced
        self.candidate = candidate
        self.differences = 0
        """How many evaluations the candidate answered differently (errors included)."""
        self.evaluations = 0
        """How many evaluations were compared."""

    @property
    def version(self) -> str:
        """The enforced engine's version (the candidate never decides)."""
        return self.enforced.version

    async def evaluate(self, input: dict[str, Any]) -> PolicyDecision:
        """The enforced decision; raises the enforced engine's ``PolicyError`` only."""
        try:
            enforced = await self.enforced.evaluate(input)
        except PolicyError as exc:
            await self._compare(input, None, exc)
            raise
        await self._compare(input, enforced, None)
        return enforced

    async def query(self, path: str, input: dict[str, Any]) -> Any:
        """Queries go to the enforced engine only."""
        return await self.enforced.query(path, input)

    async def reload(self) -> None:
        """Reload both; a candidate that fails to load is logged and keeps its old policy.

        Raises ``PolicyLoadError`` only for the enforced engine.
        """
        await self.enforced.reload()
        try:
            await self.candidate.reload()
        except Exception as exc:  # the candidate must never break the enforced path
            log.warning("policy_shadow_reload_failed", error=str(exc))

    async def close(self) -> None:
        """Close both engines."""
        try:
            await self.candidate.close()
        finally:
            await self.enforced.close()

    async def _compare(self, input: dict[str, Any], enforced: PolicyDecision | None, error: PolicyError | None) -> None:
        self.evaluations += 1
        try:
            candidate = await self.candidate.evaluate(input)
            theirs: dict[str, Any] = {"decision": candidate.model_dump()}
        except PolicyError as exc:
            theirs = {"error": exc.code, "detail": exc.detail}
        except Exception as exc:  # noqa: BLE001 - a candidate bug is data, not a failure
            theirs = {"error": type(exc).__name__, "detail": str(exc)}
        ours: dict[str, Any] = {"decision": enforced.model_dump()} if enforced else {"error": error.code if error else ""}
        if error is not None:
            ours["detail"] = error.detail
        if _same(ours, theirs):
            return
        self.differences += 1
        log.warning(
            "policy_shadow_difference",
            tool=(input.get("tool") or {}).get("name") if isinstance(input.get("tool"), dict) else None,
            args_hash=input.get("args_hash"),
            enforced=ours,
            candidate=theirs,
            enforced_version=self.enforced.version,
            candidate_version=self.candidate.version,
        )


def _same(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    if "decision" in ours or "decision" in theirs:
        return ours.get("decision") == theirs.get("decision")
    return ours.get("error") == theirs.get("error")
