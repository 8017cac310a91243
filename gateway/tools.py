"""The tool registry: registered tools only, each with its compiled schema."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from gateway.arguments import SchemaValidator
from gateway.config import ToolConfig


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    config: ToolConfig
    validator: SchemaValidator
    schema_json: str
    _risk: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_risk", self.config.risk.model_dump())  # once, not per call

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def read_only(self) -> bool:
        return self.config.risk.side_effect in ("none", "read")

    def policy_view(self) -> dict:
        """The ``tool`` part of the policy input."""
        c = self.config
        return {
            "name": c.name,
            "version": c.version,
            "risk": dict(self._risk),
            "labels": list(c.labels),
            "constraints": dict(c.constraints),
        }


class ToolRegistry:
    def __init__(self, tools: Iterable[ToolConfig]) -> None:
        self._tools = {
            t.name: ToolDescriptor(t, SchemaValidator.compile(t.input_schema), json.dumps(t.input_schema, sort_keys=True))
            for t in tools
        }

    def resolve(self, name: str) -> ToolDescriptor | None:
        return self._tools.get(name)

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
