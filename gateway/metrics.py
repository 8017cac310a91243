"""Prometheus metrics, off by default: ``observability: {metrics_port: 9464}`` turns them on.

The pipeline reports every stage outcome it audits through ``stage()`` (one check of
``enabled`` when off). Metrics, all labelled with the stable outcome ``code``:

- ``toolgate_decisions_total{outcome, code}``: one per call; outcome is ``executed`` (the tool
  ran), ``replayed`` (a stored outcome was returned) or ``not_executed``.
- ``toolgate_call_seconds{code}``: whole-call latency.
- ``toolgate_stage_seconds{stage, code}``: time from the previous stage's outcome to this one's.
- ``toolgate_policy_decisions_total{decision}``: allow / deny / require_approval /
  require_more_evidence, or the error code when the policy could not decide.
- ``toolgate_grants_consumed_total``: grants whose single use was claimed by this replica.
- ``toolgate_approvals_pending``: pending, unexpired approval requests (read from the store
  when scraped: counted there; best effort).

The endpoint (``/metrics`` on ``metrics_host:metrics_port``; port 0 picks a free one) is
prometheus-client's own HTTP server in a daemon thread. prometheus-client is the ``metrics``
extra; it is imported only when metrics are enabled.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.config import ConfigError
from gateway.tracing import TracingConfig

log = structlog.get_logger("toolgate.metrics")

enabled = False
"""True once ``configure`` started the endpoint; the pipeline checks it before calling ``stage``."""


STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ObservabilityConfig(BaseModel):
    """The ``observability:`` section of the config (``Config.observability`` is a dict)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Port of the Prometheus endpoint; absent = no metrics; 0 = any free port."""
    metrics_host: str = "127.0.0.1"
    """Address the endpoint binds (0.0.0.0 to let a Prometheus outside the pod scrape it)."""
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    """OpenTelemetry spans per stage (off by default)."""


def observability_config(config: Any) -> ObservabilityConfig:
    """Validate ``config.observability``; raise ConfigError naming the field."""
    try:
        return ObservabilityConfig.model_validate(config.observability or {})
    except ValidationError as exc:
        lines = [f"observability.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from exc


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("toolgate_decisions", "Calls by final outcome and code", ["outcome", "code"], registry=r)
        self.call_seconds = Histogram("toolgate_call_seconds", "Whole-call latency", ["code"], registry=r, buckets=STAGE_BUCKETS)
        self.stage_seconds = Histogram(
            "toolgate_stage_seconds", "Latency of each pipeline stage", ["stage", "code"], registry=r, buckets=STAGE_BUCKETS
        )
        self.policy = Counter("toolgate_policy_decisions", "Policy decisions", ["decision"], registry=r)
        self.grants = Counter("toolgate_grants_consumed", "Grants consumed (single use claimed)", registry=r)
        self.marks: dict[str, float] = {}  # decision_id -> monotonic time of its last stage outcome
        self.port = 0
        self.pending = _PendingApprovals()
        r.register(self.pending)


_m: _Metrics | None = None


def configure(config: Any, *, store: Any = None) -> int | None:
    """Start the endpoint if ``observability.metrics_port`` is set; returns the bound port or None.

    ``store`` (optional) feeds the approvals-pending gauge at scrape time. Idempotent: a second
    call in the same process keeps the first endpoint.
    """
    global _m, enabled
    settings = observability_config(config)
    if settings.metrics_port is None:
        return None
    if _m is None:
        from prometheus_client import start_http_server

        m = _Metrics()
        try:
            server, _thread = start_http_server(settings.metrics_port, addr=settings.metrics_host, registry=m.registry)
        except OSError as exc:
            raise OSError(exc.errno, f"observability.metrics_port: cannot listen on {settings.metrics_host}:"
                          f"{settings.metrics_port}: {exc.strerror or exc}") from None
        m.port = server.server_port
        _m = m
        log.info("metrics_listening", host=settings.metrics_host, port=m.port)
    if store is not None and hasattr(store, "count_pending_approvals"):
        _m.pending.source = (store, asyncio.get_running_loop())
    enabled = True
    return _m.port


def port() -> int | None:
    """The endpoint's port, or None when metrics are off."""
    return _m.port if _m else None


# -- what the pipeline calls ------------------------------------------------------------


def stage(ctx: Any, stage_name: str, code: Any, fields: Mapping[str, Any]) -> None:
    """One stage outcome of one call (called from ``Pipeline._audit`` when enabled)."""
    m = _m
    if m is None:
        return
    now, code = time.monotonic(), str(code)
    if stage_name == "result":
        m.marks.pop(ctx.decision_id, None)
        record_result(code, executed=bool(fields.get("executed")), replayed=bool(fields.get("replayed")),
                      seconds=now - ctx.started)
        return
    observe_stage(stage_name, code, now - m.marks.get(ctx.decision_id, ctx.started))
    m.marks[ctx.decision_id] = now
    if stage_name == "policy":
        m.policy.labels(str(fields.get("decision") or code)).inc()
    elif stage_name == "grant" and fields.get("claimed"):
        m.grants.inc()


def observe_stage(stage_name: str, code: str, seconds: float) -> None:
    if _m is not None:
        _m.stage_seconds.labels(stage_name, code).observe(max(seconds, 0.0))


def record_result(code: str, *, executed: bool = False, replayed: bool = False, seconds: float | None = None) -> None:
    if _m is None:
        return
    outcome = "executed" if executed else "replayed" if replayed else "not_executed"
    _m.decisions.labels(outcome, code).inc()
    if seconds is not None:
        _m.call_seconds.labels(code).observe(max(seconds, 0.0))


class _PendingApprovals:
    """A collector: counts pending approvals in the store when Prometheus scrapes."""

    def __init__(self, timeout: float = 2.0) -> None:
        self.source: tuple[Any, asyncio.AbstractEventLoop] | None = None
        self._timeout = timeout

    def describe(self):
        return []

    def collect(self):  # runs in the endpoint's thread
        from prometheus_client.core import GaugeMetricFamily

        if self.source is None:
            return
        store, loop = self.source
        gauge = GaugeMetricFamily("toolgate_approvals_pending", "Pending, unexpired approval requests")
        # counted in the store: reading the pending records (arguments and all) on each scrape cost
        # up to a few GiB; an expiry that is no number, or past year 9999, is past (``past_expiry``)
        from gateway.approvals.malformed import MAX_TIME  # a later expiry is damage

        future = None
        try:
            count = store.count_pending_approvals(after=time.time(), until=MAX_TIME)
            future = asyncio.run_coroutine_threadsafe(count, loop)
            pending = future.result(self._timeout)
        except Exception as exc:  # store down, loop closed, too slow: leave the gauge out of this scrape
            if future is not None:
                future.cancel()  # a count left running held a store connection past the scrape
            log.warning("approvals_pending_unavailable", error=type(exc).__name__)
            return
        gauge.add_metric([], pending)
        yield gauge
