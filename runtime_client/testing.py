"""Test doubles shipped with the library: use these instead of ad-hoc mocks.

- ``FakeGateway``: a scripted in-memory gateway (tools, policy verdicts, approvals, grants,
  idempotency, Watch), with ``client()`` / ``async_client()``.
- ``serve_fake_gateway``: the same fake over real gRPC on 127.0.0.1, port 0.
- ``ScriptedModel``: a ``ModelAdapter`` that returns recorded decisions or responses in order.
- ``scripted_decide``: a ``decide`` function that returns the given decisions in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from runtime_client._decisions import Decision
from runtime_client._errors import ModelOutputError
from runtime_client._fake import AsyncFakeTransport, ExecutedCall, FakeGateway, FakeTransport, args_hash
from runtime_client._fake_server import serve_fake_gateway
from runtime_client._model import parse_openai_response
from runtime_client._state import AgentState
from runtime_client._types import ToolSpec


class ScriptedModel:
    """Returns scripted items in order: a ``Decision`` as is, a dict as an OpenAI response.

    ``requests`` records what the model was shown (messages, tool names)."""

    def __init__(self, script: Iterable[Any]) -> None:
        self._script = list(script)
        self.requests: list[tuple[list[dict[str, Any]], list[str]]] = []

    async def decide(self, messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec]) -> Decision:
        self.requests.append((list(messages), [t.name for t in tools]))
        if not self._script:
            raise ModelOutputError("scripted model ran out of responses")
        item = self._script.pop(0)
        return parse_openai_response(item, tools=tools) if isinstance(item, dict) else item


def scripted_decide(*decisions: Any) -> Callable[[AgentState], Any]:
    """``decide`` returning ``decisions`` in order, then repeating the last one."""
    queue = list(decisions)

    def decide(state: AgentState) -> Any:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return decide


__all__ = sorted([
    "AsyncFakeTransport", "ExecutedCall", "FakeGateway", "FakeTransport", "ScriptedModel",
    "args_hash", "scripted_decide", "serve_fake_gateway",
])
