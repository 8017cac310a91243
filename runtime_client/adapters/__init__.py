"""Framework adapters, each an optional import (install the matching extra):

- ``runtime_client.adapters.langchain``: ``langchain_tools`` → LangChain ``StructuredTool``s
- ``runtime_client.adapters.openai_agents``: ``function_tools`` → OpenAI Agents SDK ``FunctionTool``s
- ``runtime_client.adapters.mcp``: ``mcp_server`` → an MCP server any MCP client can list and call

Every call still goes through the gateway; an approval-required or refused outcome is
reported to the framework as a tool error it can show, never silently dropped; so is a call the
gateway could not answer (down, API key rejected, deadline passed: ``error_text``, with the
client error's ``code`` such as ``unavailable`` or ``unauthenticated``). Each adapter
remembers the approval id of a call awaiting approval (``ApprovalMemory``), so the same call
with the same arguments, made again once approved, runs (once); identical calls made
concurrently share that one approval request. A retry of a call whose answer never came carries
the same idempotency key, so the gateway replays its outcome instead of running it twice.
That memory is scoped: per MCP session in ``mcp_server`` (unless a ``run_id`` is given), per
tool list in the LangChain and Agents SDK adapters (build one list per agent run or
conversation: the users of one list share its approvals).
Each adapter takes an optional ``evidence`` provider, as ``run_agent`` does: asked when the
policy wants more evidence for a call, which is then sent once more with what it gives (and,
if it then awaits approval, the approved call with it too); without one, the model is told what
evidence is missing.
"""

from runtime_client.adapters._common import ApprovalMemory, CallText, call_text, error_text

__all__ = ["ApprovalMemory", "CallText", "call_text", "error_text"]
