"""Setup shared by the executor tests: a resolved call context, nested data, names of test tools."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gateway.config import ToolConfig
from gateway.models import CallContext, Identity, ToolCall
from gateway.tools import ToolRegistry

SERVER = str(Path(__file__).parent / "data" / "mcp_upstream.py")  # the MCP upstream the tests run
HANG = "tests.executors.data.python_tools:hang"  # a python tool that waits for its test's gate
SECRET = "sk_live_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # an upstream key an output cap must never cut


def call_context(tool_config: ToolConfig, tenant: str = "acme", args: dict[str, Any] | None = None,
                 credentials: Any = None, *, decision_id: str = "") -> CallContext:
    """A call to ``tool_config``, resolved, as the pipeline hands it on; a fresh decision id unless given."""
    ctx = CallContext(decision_id or f"d-{time.monotonic_ns()}", Identity(tenant, "agent"),
                      ToolCall(tool_config.name, b"{}"), 0.0)
    ctx.tool = ToolRegistry([tool_config]).resolve(tool_config.name)
    ctx.args, ctx.credentials = dict(args or {}), credentials
    return ctx


def nested(value: Any, depth: int) -> Any:
    """``value`` inside ``depth`` lists."""
    for _ in range(depth):
        value = [value]
    return value
