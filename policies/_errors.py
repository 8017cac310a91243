"""Errors of the policy layer.

::

    Exception
    ├── PolicyError       an evaluation could not produce a valid decision (the call is denied)
    │                     .code  "policy_unavailable" | "policy_invalid_decision"
    │                     .detail  internal explanation, for the audit log only
    └── PolicyLoadError   a bundle could not be loaded (the old policy, if any, keeps serving)

Errors of the engines (regorus, httpx, OPA) are translated into these at one boundary
each, with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Final, Literal

PolicyErrorCode = Literal["policy_unavailable", "policy_invalid_decision"]

POLICY_UNAVAILABLE: Final = "policy_unavailable"
POLICY_INVALID_DECISION: Final = "policy_invalid_decision"
_CODES: Final = frozenset({POLICY_UNAVAILABLE, POLICY_INVALID_DECISION})


class PolicyError(Exception):
    """Raised when an evaluation fails; every PolicyError means the call is denied.

    ``policy_unavailable``: the engine raised, timed out, or could not be reached.
    ``policy_invalid_decision``: the engine answered, but not with exactly one valid
    decision document (undefined, several results, wrong shape).

    ``detail`` is internal (engine messages, positions); give callers only ``code``.
    """

    def __init__(self, code: PolicyErrorCode, detail: str = "") -> None:
        if code not in _CODES:
            raise ValueError(f"unknown policy error code {code!r}")
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code: PolicyErrorCode = code
        self.detail = detail


class PolicyLoadError(Exception):
    """Raised when a bundle cannot be loaded: no such folder, no policy, a parse error,
    bad data files, or (embedded engine) a builtin the engine does not implement.

    The message names the file and line where known.
    """
