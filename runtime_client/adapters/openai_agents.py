"""OpenAI Agents SDK adapter: gateway tools as ``FunctionTool``s (``toolgate[openai-agents]``).

Arguments arrive as the model's JSON text and are parsed strictly; outcomes other than a
successful observation come back as error text the agent can act on, and so does a call the
gateway could not answer (``gateway error (unavailable): ...``): ``on_invoke_tool`` never raises
a client error. The tools made by one
``function_tools`` call share an ``ApprovalMemory``: the same call with the same arguments,
made again once approved, presents its approval and runs. So the list is the scope of
approvals: build one per agent run or conversation, not one ``Agent`` for many users (whose
identical calls would present each other's approvals).

``evidence``: a provider, as ``run_agent`` takes one (``EvidenceRequest`` in, a dict or None
out), asked when the policy wants more evidence for a call; the call is sent once more with
what it gives. Without one, when it gives None, or when the policy still wants more, the error
text names what is missing (``more evidence required: [...]``); a provider that raises gives
error text too (``gateway error (evidence_provider_failed): ...``). A call that then awaits
approval is handled as any other, and its approved call is sent with that evidence.
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
from runtime_client._evidence import EvidenceProvider
from runtime_client._model import strict_json_object
from runtime_client._types import ToolSpec
from runtime_client.adapters._common import ApprovalMemory, call as call_gateway


def function_tool(client: AsyncGatewayClient, spec: ToolSpec, *, run_id: str = "",
                  approvals: ApprovalMemory | None = None,
                  evidence: EvidenceProvider | None = None) -> FunctionTool:
    memory = approvals if approvals is not None else ApprovalMemory()

    async def invoke(ctx: Any, args_json: str) -> str:
        try:
            args = strict_json_object(args_json or "{}")
        except ModelOutputError as exc:
            return f"refused (invalid_arguments): {exc}"
        text, _ = await call_gateway(client, memory, spec.name, args, run_id=run_id, evidence=evidence)
        return text.text

    return FunctionTool(name=spec.name, description=spec.description or spec.name,
                        params_json_schema=spec.input_schema, on_invoke_tool=invoke,
                        strict_json_schema=False)


async def function_tools(client: AsyncGatewayClient, *, run_id: str = "",
                         evidence: EvidenceProvider | None = None) -> list[FunctionTool]:
    """One ``FunctionTool`` per tool the gateway lists for this caller; ``evidence`` answers
    the policy's requests for more evidence (see the module docstring)."""
    memory = ApprovalMemory()
    return [function_tool(client, spec, run_id=run_id, approvals=memory, evidence=evidence)
            for spec in await client.list_tools()]
