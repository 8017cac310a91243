"""runtime_client: the agent-loop library beside the toolgate gateway.

An agent never runs a side effect itself: ``run_agent`` sends every tool decision through
``AsyncGatewayClient`` and records what came back as untrusted observations. Test doubles
live in ``runtime_client.testing``; framework adapters in ``runtime_client.adapters``.
"""

from runtime_client._agent_run import AgentRun
from runtime_client._checkpoints import CheckpointStore, MemoryCheckpoints, SQLiteCheckpoints
from runtime_client._client import AsyncGatewayClient, GatewayClient
from runtime_client._context import Context, ContextConfig, OmittedMemory, build_context
from runtime_client._decisions import Answer, AskHuman, Decision, Stop, ToolCall, ToolCalls, parse_decision
from runtime_client._errors import (
    ApprovalError, ApprovalNotFoundError, ApprovalTimeoutError, AuthenticationError, CheckpointError,
    CheckpointNotFoundError, ClientClosedError, GatewayTimeoutError, GrantUnavailableError,
    MalformedRequestError, ModelOutputError, ToolgateClientError, TransportError,
)
from runtime_client._eval import EvalResult, TrajectoryEval, evaluate
from runtime_client._events import Event, EventLog, replay
from runtime_client._evidence import EvidenceRequest
from runtime_client._graph import END, Failed, GraphResult, Node, Rejected, StateGraph
from runtime_client._loop import RunResult, resume, run_agent
from runtime_client._model import ModelAdapter, OpenAIChatAdapter, model_decide, parse_openai_response
from runtime_client._state import AgentState, MemoryItem, Message, PendingApproval, StepObservation, StopReason
from runtime_client._trace import TRACE_EVENT_TYPES, TraceEvent, Tracer
from runtime_client._transport import AsyncTransport, Transport
from runtime_client._types import (
    Approval, ApprovalEvent, ApprovalRequired, ErrorInfo, EvidenceRequired, ExecuteRequest,
    FieldError, Observation, Provenance, Refused, Risk, ToolResult, ToolSpec,
)

__all__ = sorted([
    "AgentRun", "AgentState", "Answer", "Approval", "ApprovalError", "ApprovalEvent", "ApprovalNotFoundError",
    "ApprovalRequired", "ApprovalTimeoutError", "AskHuman", "AsyncGatewayClient", "AsyncTransport",
    "AuthenticationError", "CheckpointError", "CheckpointNotFoundError", "CheckpointStore", "ClientClosedError",
    "Context", "ContextConfig", "Decision", "END", "ErrorInfo", "EvalResult", "Event", "EventLog",
    "EvidenceRequest", "EvidenceRequired", "ExecuteRequest", "Failed", "FieldError", "GatewayClient",
    "GatewayTimeoutError", "GrantUnavailableError", "GraphResult", "MalformedRequestError",
    "MemoryCheckpoints", "MemoryItem", "Message", "ModelAdapter", "ModelOutputError", "Node",
    "Observation", "OmittedMemory", "OpenAIChatAdapter", "PendingApproval", "Provenance",
    "Refused", "Rejected", "Risk", "RunResult", "SQLiteCheckpoints", "StateGraph", "StepObservation",
    "Stop", "StopReason", "TRACE_EVENT_TYPES", "ToolCall", "ToolCalls", "ToolResult", "ToolSpec",
    "ToolgateClientError", "TraceEvent", "Tracer", "Transport", "TransportError", "TrajectoryEval",
    "build_context", "evaluate", "model_decide", "parse_decision", "parse_openai_response",
    "replay", "resume", "run_agent",
])
