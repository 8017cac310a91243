"""AgentRun: one agent run as a graph node, so ``run_a >> run_b >> run_c`` is a pipeline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime_client._client import AsyncGatewayClient
from runtime_client._graph import Failed, Node, NodeResult, Rejected
from runtime_client._loop import Decide, RunResult, run_agent
from runtime_client._state import AgentState, StopReason


class AgentRun(Node):
    """Runs ``decide`` as a fresh ``AgentState`` over a dict graph state.

    The goal is a string or ``goal(state) -> str`` (so a run can build on the previous
    answer, found at ``state["last_answer"]``). Results land in ``state["runs"][name]``.
    A refused run rejects the graph; any other stop but success fails it.
    """

    def __init__(self, name: str, decide: Decide, gateway: AsyncGatewayClient, *,
                 goal: str | Callable[[dict[str, Any]], str], max_steps: int = 10,
                 **run_options: Any) -> None:
        super().__init__(self._run, name)
        self.decide, self.gateway, self.goal = decide, gateway, goal
        self.max_steps, self.run_options = max_steps, {"checkpoints": None, **run_options}

    async def _run(self, state: dict[str, Any]) -> NodeResult:
        goal = self.goal(state) if callable(self.goal) else self.goal
        result: RunResult = await run_agent(
            AgentState(goal=goal, max_steps=self.max_steps), self.decide, self.gateway,
            **self.run_options)
        state.setdefault("runs", {})[self.name] = result
        stop = result.stop_reason
        if stop is StopReason.SUCCESS:
            state["last_answer"] = result.state.answer
            return None
        if stop is StopReason.REFUSED:
            return Rejected(f"{self.name}: refused")
        return Failed(f"{self.name}: {stop.value if stop else 'no stop reason'}")
