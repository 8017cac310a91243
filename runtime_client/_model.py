"""Model adapters: (messages, tool specs) → one decision, read strictly.

``OpenAIChatAdapter`` speaks chat-completions tool calling: it builds the request body and
parses the response's ``choices[0].message`` (``tool_calls`` with JSON ``arguments``, or
``content``). The HTTP call itself is injected (``complete``), so tests replay recorded
responses and no key is needed. Bad output raises ``ModelOutputError``; the loop stops the
run with ``invalid_decision``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from gateway.json_keys import NotStrictJson, strict_loads
from runtime_client._context import Context
from runtime_client._decisions import Answer, Decision, ToolCall, ToolCalls
from runtime_client._errors import ModelOutputError
from runtime_client._state import AgentState
from runtime_client._types import ToolSpec

Complete = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]


class ModelAdapter(Protocol):
    async def decide(self, messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec]) -> Decision: ...


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": spec.name, "description": spec.description, "parameters": spec.input_schema}}


def strict_json_object(text: Any) -> dict[str, Any]:
    """Parse tool arguments: one JSON object, no duplicate keys, every number finite (no NaN,
    Infinity or 1e400), not nested past the parser (``gateway.json_keys.strict_loads``)."""
    if not isinstance(text, str):
        raise ModelOutputError("tool arguments must be a JSON string")
    try:
        value = strict_loads(text)
    except NotStrictJson as exc:
        raise ModelOutputError(f"tool arguments are not strict JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ModelOutputError("tool arguments must be a JSON object")
    return value


def _tool_call(raw: Any, known: set[str] | None) -> ToolCall:
    if not isinstance(raw, dict) or raw.get("type") != "function":
        raise ModelOutputError("tool call must be an object of type 'function'")
    fn = raw.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ModelOutputError("tool call needs function.name")
    if known is not None and fn["name"] not in known:
        raise ModelOutputError(f"model called a tool it was not offered: {fn['name']!r}")
    return ToolCall(fn["name"], strict_json_object(fn.get("arguments")))


def parse_openai_response(response: Any, *, tools: Sequence[ToolSpec] | None = None) -> Decision:
    """Read a chat-completions response as exactly one decision."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or len(choices) != 1:
        raise ModelOutputError("response must have exactly one choice")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict) or message.get("role") != "assistant":
        raise ModelOutputError("choice must carry an assistant message")
    if message.get("refusal"):
        raise ModelOutputError(f"model refused: {message['refusal']}")
    known = {t.name for t in tools} if tools is not None else None
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise ModelOutputError("tool_calls must be a list")
        parsed = tuple(_tool_call(c, known) for c in calls)
        return parsed[0] if len(parsed) == 1 else ToolCalls(parsed)
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        return Answer(content)
    raise ModelOutputError("message has neither tool_calls nor content")


class OpenAIChatAdapter:
    """Chat-completions tool calling. ``complete(request_body) -> response_body``."""

    def __init__(self, complete: Complete, *, model: str = "gpt-4o-mini",
                 temperature: float = 0.0) -> None:
        self.complete, self.model, self.temperature = complete, model, temperature

    def request(self, messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages),
                                "temperature": self.temperature}
        if tools:
            body["tools"] = [openai_tool(t) for t in tools]
        return body

    async def decide(self, messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec]) -> Decision:
        out = self.complete(self.request(messages, tools))
        response = await out if inspect.isawaitable(out) else out
        return parse_openai_response(response, tools=tools)


def model_decide(adapter: ModelAdapter) -> Callable[[AgentState, Context], Awaitable[Decision]]:
    """A ``decide(state, context)`` for ``run_agent`` that asks ``adapter``."""

    async def decide(state: AgentState, context: Context) -> Decision:
        return await adapter.decide(context.messages, context.tools)

    return decide
