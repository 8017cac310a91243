"""Trajectory evaluation: judge what a run did, not only what it said."""

from __future__ import annotations

from dataclasses import dataclass

from runtime_client._state import AgentState, StopReason


@dataclass(frozen=True, slots=True)
class TrajectoryEval:
    """Expectations for one run. Empty fields are not checked."""

    required_tools: tuple[str, ...] = ()
    """Each must have executed at least once."""
    forbidden_tools: tuple[str, ...] = ()
    """None may have been attempted (executed, refused or paused for approval)."""
    expected_stop_reason: StopReason | str | None = None
    max_steps: int | None = None
    """The run may use at most this many steps."""
    tool_order: tuple[str, ...] = ()
    """These tools executed as a subsequence in this order."""

    def evaluate(self, state: AgentState) -> EvalResult:
        failures = [*self._tools(state), *self._stop(state)]
        if self.max_steps is not None and state.steps > self.max_steps:
            failures.append(f"used {state.steps} steps, at most {self.max_steps} allowed")
        return EvalResult(not failures, tuple(failures))

    def _tools(self, state: AgentState) -> list[str]:
        attempted = {o.tool for o in state.observations if o.kind == "tool" and o.tool}
        out = [f"required tool {t!r} never executed" for t in self.required_tools
               if t not in state.tools_called]
        out += [f"forbidden tool {t!r} was called" for t in self.forbidden_tools if t in attempted]
        if self.tool_order and not _subsequence(self.tool_order, state.tools_called):
            out.append(f"tools {list(self.tool_order)} not executed in order")
        return out

    def _stop(self, state: AgentState) -> list[str]:
        expected = self.expected_stop_reason
        if expected is None or state.stop_reason == StopReason(expected):
            return []
        got = state.stop_reason.value if state.stop_reason else None
        return [f"stop reason {got!r}, expected {StopReason(expected).value!r}"]


def _subsequence(needle: tuple[str, ...], hay: list[str]) -> bool:
    it = iter(hay)
    return all(any(x == y for y in it) for x in needle)


@dataclass(frozen=True, slots=True)
class EvalResult:
    passed: bool
    failures: tuple[str, ...] = ()


def evaluate(state: AgentState, spec: TrajectoryEval) -> EvalResult:
    return spec.evaluate(state)
