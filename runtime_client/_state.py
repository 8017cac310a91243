"""AgentState: everything a run knows, as a JSON round-trippable pydantic model."""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class StopReason(StrEnum):
    SUCCESS = "success"
    BLOCKED = "blocked"
    REFUSED = "refused"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INVALID_DECISION = "invalid_decision"
    TOOL_FAILURE = "tool_failure"
    AWAITING_APPROVAL = "awaiting_approval"
    CANCELLED = "cancelled"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Message(_Model):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool: str = ""
    trust: Literal["trusted", "untrusted"] = "trusted"
    flags: list[str] = Field(default_factory=list)
    """The gateway's flags on a tool's output (``possible_prompt_injection``, ``truncated``)."""


class StepObservation(_Model):
    """What one step produced: a decision, a tool outcome, or a note from the runtime."""

    step: int
    kind: Literal["decision", "tool", "runtime"]
    summary: str
    tool: str = ""
    code: str = ""
    status: str = ""
    data: Any = None
    trust: Literal["trusted", "untrusted"] = "trusted"
    decision_id: str = ""


class MemoryItem(_Model):
    """A remembered fact; ``scope`` decides whether a run may see it (task, project, user, ...)."""

    scope: str
    key: str
    text: str


class PendingApproval(_Model):
    """A tool call paused for approval, checkpointed so ``resume`` can run it exactly once."""

    approval_id: str
    tool: str
    input: dict[str, Any]
    step: int
    idempotency_key: str
    decision_id: str = ""
    reasons: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] | None = None
    """The evidence the call was sent with: sent again with the approved call."""


class AgentState(_Model):
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    goal: str
    steps: int = 0
    max_steps: int = Field(default=10, ge=1)
    max_calls_per_step: int = Field(default=16, ge=1)
    """Tool calls one decision may make; those past it are not run (the model is told)."""
    observations: list[StepObservation] = Field(default_factory=list)
    tools_called: list[str] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    answer: str | None = None
    messages: list[Message] = Field(default_factory=list)
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    memory: list[MemoryItem] = Field(default_factory=list)
    memory_scopes: list[str] = Field(default_factory=lambda: ["task"])
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentState:
        return cls.model_validate_json(text)
