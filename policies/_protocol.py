"""The one protocol every policy engine implements."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from policies._decision import PolicyDecision


@runtime_checkable
class PolicyEngine(Protocol):
    """Evaluates the policy for one call. Every failure is a ``PolicyError`` (⇒ deny).

    The policy stage bounds every evaluation by ``policy.timeout_ms`` with a timer of its own,
    except for an engine that declares one of two optional attributes (``gateway.policy.decide``):
    ``inline = True``, an ``evaluate`` that never awaits and enforces the limit after the fact
    (the embedded engine); or ``wait_bound_ms``, a positive ``int`` no larger than the stage's
    limit, for an engine whose every await is under a timer of its own that fails closed (the
    OPA engine). An engine that declares neither always gets the stage's timer.
    """

    @property
    def version(self) -> str:
        """Identifies the policy now serving, e.g. ``sha256:<16 hex>`` over the bundle."""
        ...

    async def evaluate(self, input: dict[str, Any]) -> PolicyDecision:
        """The strictly parsed decision for ``input``.

        Raises ``PolicyError``: ``policy_unavailable`` when the engine fails or times out,
        ``policy_invalid_decision`` when the answer is undefined or malformed.
        """
        ...

    async def query(self, path: str, input: dict[str, Any]) -> Any:
        """The value of any rule (``data.toolgate.visible``), or ``UNDEFINED``.

        Raises ``PolicyError("policy_unavailable")`` when the engine fails.
        """
        ...

    async def reload(self) -> None:
        """Load the bundle again, atomically, without holding the event loop for its I/O.

        The new policy is built completely before it replaces the old one; on failure
        raises ``PolicyLoadError`` and the old policy keeps serving.
        """
        ...

    async def close(self) -> None:
        """Release connections and other resources."""
        ...
