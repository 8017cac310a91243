"""The decision document, read strictly.

A policy answers with exactly one JSON object (see DESIGN.md "Policy contract").
``parse_decision`` turns it into a frozen ``PolicyDecision`` or raises
``PolicyError("policy_invalid_decision")`` — there is no lenient path: anything the
gateway cannot read exactly as specified denies.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from policies._errors import POLICY_INVALID_DECISION, PolicyError

DecisionKind = Literal["allow", "deny", "require_approval", "require_more_evidence"]


class _Undefined:
    """The type of ``UNDEFINED``: a query whose result is undefined (no value)."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __bool__(self) -> bool:
        return False


UNDEFINED: Final = _Undefined()
"""Sentinel returned by ``PolicyEngine.query`` when the queried rule is undefined."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ApprovalRequirement(_Strict):
    """Who must approve before a ``require_approval`` call may run."""

    groups_any: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    """Approvers must belong to at least one of these groups (no group is named ""; a request
    for one could never be approved, and waited out its time-to-live unsaid)."""
    quorum: int = Field(default=1, ge=1, le=10)
    """Distinct approvers needed."""
    ttl_seconds: int = Field(default=900, ge=1, le=86400)
    """How long the pending request (and the resulting grant) stays valid."""


class PolicyDecision(_Strict):
    """What the policy decided for one call. Frozen; unknown fields are rejected."""

    decision: DecisionKind
    """allow | deny | require_approval | require_more_evidence."""
    reasons: list[str] = Field(default_factory=list)
    """Short human-readable reasons, shown to the agent and approvers."""
    constraints: dict[str, Any] = Field(default_factory=dict)
    """Scope narrowing for credentials and the executor (e.g. ``hosts``)."""
    approval: ApprovalRequirement | None = None
    """Required when decision is require_approval."""
    evidence: list[str] = Field(default_factory=list)
    """Missing evidence keys; non-empty when decision is require_more_evidence."""
    audit: Literal["minimal", "full"] = "minimal"
    """full: the audit record holds the arguments and the policy input."""

    _engine_decision_id: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _consistent(self) -> PolicyDecision:
        if self.decision == "require_approval" and self.approval is None:
            raise ValueError("require_approval needs an 'approval' requirement")
        if self.decision == "require_more_evidence" and not self.evidence:
            raise ValueError("require_more_evidence needs a non-empty 'evidence' list")
        return self

    @property
    def engine_decision_id(self) -> str | None:
        """The engine's own id for this evaluation (OPA's ``decision_id``), if it gave one.

        Not part of the policy's answer (a policy cannot set it) and distinct from the
        gateway's decision_id; record it to join the audit log with OPA's decision log.
        """
        private = self.__pydantic_private__  # read directly: pydantic's __getattr__ path cost ~4 µs a call
        return private.get("_engine_decision_id") if private else None


_validate_json = PolicyDecision.__pydantic_validator__.validate_json
"""``PolicyDecision.model_validate_json`` without its Python wrapper (~0.5 µs of ~4 a decision)."""


_validate_python = PolicyDecision.__pydantic_validator__.validate_python


def parse_decision(value: Any, *, engine_decision_id: str | None = None) -> PolicyDecision:
    """Read one decision document strictly; ``engine_decision_id`` (OPA's ``decision_id``) goes on
    the new decision, the only way a decision gets one.

    Raises ``PolicyError("policy_invalid_decision")`` when ``value`` is ``UNDEFINED``,
    not a JSON object (e.g. a list of several results), names an unknown decision,
    has unknown fields, or a field has the wrong type or an out-of-range value.
    """
    if value is UNDEFINED:
        raise PolicyError(POLICY_INVALID_DECISION, "the decision is undefined")
    if not isinstance(value, dict):
        raise PolicyError(POLICY_INVALID_DECISION, f"the decision is a {_json_type(value)}, not an object")
    try:
        decision = _validate_python(value)
    except ValidationError as exc:
        raise _malformed(exc) from exc
    if engine_decision_id is not None:
        decision._engine_decision_id = engine_decision_id  # made just above: no one else holds it
    return decision


def parse_decision_json(text: str) -> PolicyDecision:
    """``parse_decision(json.loads(text))`` for an engine that answers in JSON text.

    An object is read by pydantic straight from the text, with no Python dict in between
    (~40 % fewer instructions than ``json.loads`` and ``model_validate``; the embedded engine
    does this on every call). Same strict rules, same error code; anything that is not an object
    goes the long way, so its error says what it was. Text that is not JSON raises
    ``PolicyError("policy_invalid_decision")`` too. tests/policies/test_policy_decision.py
    holds the two to the same answers on generated documents.
    """
    if not text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise PolicyError(POLICY_INVALID_DECISION, f"the decision is not JSON: {exc}") from exc
        return parse_decision(value)
    try:
        return _validate_json(text)
    except ValidationError as exc:
        raise _malformed(exc) from exc


def _malformed(exc: ValidationError) -> PolicyError:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(decision)'}: {err['msg']}" for err in exc.errors()
    )
    return PolicyError(POLICY_INVALID_DECISION, f"malformed decision: {problems}")


def single_value(results: Any) -> Any:
    """The one value of an OPA-style result set (``[{"expressions": [{"value": v}]}]``).

    Returns ``UNDEFINED`` for an empty result set; raises
    ``PolicyError("policy_invalid_decision")`` for several results or several expressions,
    and for a malformed result set.
    """
    if not isinstance(results, list):
        raise PolicyError(POLICY_INVALID_DECISION, "the result set is not a list")
    if not results:
        return UNDEFINED
    if len(results) > 1:
        raise PolicyError(POLICY_INVALID_DECISION, f"the query has {len(results)} results, expected one")
    try:
        (expression,) = results[0]["expressions"]
        return expression["value"]
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyError(POLICY_INVALID_DECISION, "the result set does not have exactly one expression") from exc


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}.get(type(value), type(value).__name__)
