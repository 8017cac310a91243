"""OpenAI Agents SDK adapter: gateway tools as ``FunctionTool``s (``toolgate[openai-agents]``).

Arguments arrive as the model's JSON text and are parsed strictly; outcomes other than a
successful observation come back as error text the agent can act on, and so does a call the
gateway could not answer (``gateway error (unavailable): ...``): ``on_invoke_tool`` never raises
a client error. The tools made by one
``function_tools`` call share an ``ApprovalMemory``: the same call with the same arguments,
made again once approved, presents its approval and runs. So the list is the scope of
approvals: build one per agent run or conversation, not one ``Agent`` for many users (whose
identical calls would present each other's approvals).
"""

from __future__ import annotations

from typing import Any

try:
    from agents import FunctionTool
except ImportError as exc:  # pragma: no cover
    raise ImportError("runtime_client.adapters.openai_agents needs openai-agents: "
                      "pip install 'toolgate[openai-agents]'") from exc

from runtime_client._client import AsyncGatewayClient
from runtime_client._errors import ModelOutputError
from runtime_client._model import strict_json_object
from runtime_client._types import ToolSpec
from runtime_client.adapters._common import ApprovalMemory, call as call_gateway


def function_tool(client: AsyncGatewayClient, spec: ToolSpec, *, run_id: str = "",
                  approvals: ApprovalMemory | None = None) -> FunctionTool:
    memory = approvals if approvals is not None else ApprovalMemory()

    async def invoke(ctx: Any, args_json: str) -> str:
        try:
            args = strict_json_object(args_json or "{}")
        except ModelOutputError as exc:
            return f"refused (invalid_arguments): {exc}"
        text, _ = await call_gateway(client, memory, spec.name, args, run_id=run_id)
        return text.text

    return FunctionTool(name=spec.name, description=spec.description or spec.name,
                        params_json_schema=spec.input_schema, on_invoke_tool=invoke,
                        strict_json_schema=False)


async def function_tools(client: AsyncGatewayClient, *, run_id: str = "") -> list[FunctionTool]:
    memory = ApprovalMemory()
    return [function_tool(client, spec, run_id=run_id, approvals=memory)
            for spec in await client.list_tools()]
