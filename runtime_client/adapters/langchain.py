"""LangChain adapter: gateway tools as ``StructuredTool``s (``pip install toolgate[langchain]``).

The args schema is the tool's JSON Schema from ListTools. Refusals, approval pauses and calls
the gateway could not answer (it is down, the API key is rejected: ``gateway error
(unavailable): ...``) raise ``ToolException`` with ``handle_tool_error=True``, so the agent sees
them as tool output (a ``ToolMessage`` with ``status="error"`` for a ToolCall input).
The tools made by one ``langchain_tools`` call share an ``ApprovalMemory``: the same call
with the same arguments, made again once approved, presents its approval and runs. So the
list is the scope of approvals: build one per agent run or conversation, not one for many
users (whose identical calls would present each other's approvals).

``evidence``: a provider, as ``run_agent`` takes one (``EvidenceRequest`` in, a dict or None
out), asked when the policy wants more evidence for a call; the call is sent once more with
what it gives. Without one, when it gives None, or when the policy still wants more, the tool
error names what is missing (``more evidence required: [...]``); a provider that raises is a
tool error too (``gateway error (evidence_provider_failed): ...``). A call that then awaits
approval is handled as any other, and its approved call is sent with that evidence.
"""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.tools import StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("runtime_client.adapters.langchain needs langchain-core: "
                      "pip install 'toolgate[langchain]'") from exc

from runtime_client._client import AsyncGatewayClient
from runtime_client._evidence import EvidenceProvider
from runtime_client._types import ToolSpec
from runtime_client.adapters._common import ApprovalMemory, call as call_gateway


def langchain_tool(client: AsyncGatewayClient, spec: ToolSpec, *, run_id: str = "",
                   approvals: ApprovalMemory | None = None,
                   evidence: EvidenceProvider | None = None) -> StructuredTool:
    memory = approvals if approvals is not None else ApprovalMemory()

    async def call(**kwargs: Any) -> str:
        text, _ = await call_gateway(client, memory, spec.name, kwargs, run_id=run_id, evidence=evidence)
        if text.is_error:
            raise ToolException(text.text)
        return text.text

    return StructuredTool.from_function(
        coroutine=call, name=spec.name, description=spec.description or spec.name,
        args_schema=spec.input_schema, infer_schema=False, handle_tool_error=True,
        metadata={"toolgate_risk": spec.risk.side_effect, "read_only": spec.read_only})


async def langchain_tools(client: AsyncGatewayClient, *, run_id: str = "",
                          evidence: EvidenceProvider | None = None) -> list[StructuredTool]:
    """One ``StructuredTool`` per tool the gateway lists for this caller; ``evidence`` answers
    the policy's requests for more evidence (see the module docstring)."""
    memory = ApprovalMemory()
    return [langchain_tool(client, spec, run_id=run_id, approvals=memory, evidence=evidence)
            for spec in await client.list_tools()]
