"""Executors run a tool once validation, policy, approval and credentials are done.

One protocol, one module per kind (python, subprocess, http, mcp). An executor never sees
policy input or the model; it receives the validated args, the effective constraints and the
injected credentials, and returns an ``ExecResult``. It reports failures in the result;
exceptions escaping an executor are bugs and are turned into ``tool_error`` by the stage.
"""

from gateway.executors.base import ExecRequest, ExecResult, Executor, ExecutorRegistry

__all__ = ["ExecRequest", "ExecResult", "Executor", "ExecutorRegistry"]
