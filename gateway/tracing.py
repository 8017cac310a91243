"""OpenTelemetry spans per pipeline stage, off by default.

``observability: {tracing: {exporter: console}}`` turns them on. Each call becomes one
``toolgate.call`` span with a child span per stage (``toolgate.resolve``, ``toolgate.policy``,
``toolgate.execute``, ...), built from the same stage outcomes the audit log records: a
stage span runs from the previous stage's outcome to its own. Attributes carry the decision
id, the outcome code and what the audit record holds that is safe (tool name, args hash,
policy decision) — never arguments or secrets.

Exporters: ``console`` (JSON per span on stderr, batched) or ``none`` (off). Tests pass their
own exporter to ``configure``. The SDK (the ``otel`` extra) is imported only when enabled;
when off the pipeline pays one check of ``enabled`` per stage record.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict

enabled = False
"""True once ``configure`` installed a tracer; the pipeline checks it before calling ``stage``."""

SAFE_FIELDS = ("tool", "tool_version", "args_hash", "decision", "policy_version", "approval_id", "replayed",
               "executed", "status", "attempts", "claimed", "tool_escaped", "tool_sha256")
"""Step fields copied to spans: none holds argument values; a tool name no tool has arrives
only escaped and hashed (``tool_escaped``, ``tool_sha256``), as the audit keeps it."""


class TracingConfig(BaseModel):
    """``observability.tracing``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exporter: Literal["none", "console"] = "none"
    """Where spans go: none (tracing off) or console (stderr)."""
    service_name: str = "toolgate"
    """The ``service.name`` resource attribute."""


class _Tracer:
    def __init__(self, settings: TracingConfig, exporter: Any = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

        self.provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
        if exporter is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            self.provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        self.tracer = self.provider.get_tracer("toolgate")
        self.calls: dict[str, tuple[Any, Any, int]] = {}  # decision_id -> (call span, its context, last mark ns)


_t: _Tracer | None = None


def configure(config: Any, *, exporter: Any = None) -> bool:
    """Install the tracer the config asks for (or ``exporter``, for tests); returns whether on."""
    global _t, enabled
    from gateway.metrics import observability_config

    settings = observability_config(config).tracing
    if settings.exporter == "none" and exporter is None:
        return enabled
    if _t is not None:
        _t.provider.shutdown()
    _t = _Tracer(settings, exporter)
    enabled = True
    return True


def disable() -> None:
    """Flush and remove the tracer (tests; process exit flushes by itself)."""
    global _t, enabled
    enabled = False
    if _t is not None:
        _t.provider.shutdown()
        _t = None


def stage(ctx: Any, stage_name: str, code: Any, fields: Mapping[str, Any]) -> None:
    """One stage outcome of one call (called from ``Pipeline._audit`` when enabled)."""
    t = _t
    if t is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    now_ns = time.time_ns()
    code = str(code)
    entry = t.calls.get(ctx.decision_id)
    if entry is None:
        started_ns = now_ns - int((time.monotonic() - ctx.started) * 1e9)
        call_span = t.tracer.start_span("toolgate.call", start_time=started_ns,
                                        attributes={"toolgate.decision_id": ctx.decision_id})
        entry = (call_span, trace.set_span_in_context(call_span), started_ns)
    call_span, parent, last_ns = entry
    attributes = {"toolgate.decision_id": ctx.decision_id, "toolgate.code": code}
    attributes.update({f"toolgate.{k}": _attr(v) for k, v in fields.items() if k in SAFE_FIELDS})
    if stage_name == "result":
        t.calls.pop(ctx.decision_id, None)
        call_span.set_attributes(attributes)
        if code in ("internal_error", "cancelled"):
            call_span.set_status(Status(StatusCode.ERROR, code))
        call_span.end(end_time=now_ns)
        return
    span = t.tracer.start_span(f"toolgate.{stage_name}", context=parent, start_time=last_ns, attributes=attributes)
    span.end(end_time=now_ns)
    t.calls[ctx.decision_id] = (call_span, parent, now_ns)


def _attr(value: Any) -> Any:
    return value if isinstance(value, (str, bool, int, float)) else str(value)
