"""Builds the gateway's parts from a Config and owns their lifetime."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

import structlog
from policies import PolicyEngine, PolicyError, build_engine

from gateway.approvals import build_gate
from gateway.audit import AuditLog
from gateway.audit_file import PRIVATE_DIR
from gateway.audit_sign import load_signer
from gateway.auth import Authenticator, RefusalAudit
from gateway.claims import ExecutionClaims
from gateway.config import Config
from gateway.credentials import build_credentials
from gateway.execute import build_execute_stage
from gateway.models import Identity
from gateway.pipeline import Pipeline
from gateway.policy import caller_view
from gateway.store import open_store
from gateway.tools import ToolDescriptor, ToolRegistry
from gateway.workers import worker_audit_path

log = structlog.get_logger("toolgate.app")

SWEEP_INTERVAL_SECONDS = 600.0
OPA_VERSION_SECONDS = 30.0
"""How often the version of the policy an OPA server serves is asked (``refresh_policy_version``)."""


class GatewayApp:
    def __init__(self, config: Config, *, engine: PolicyEngine | None = None, worker: int | None = None) -> None:
        self.config = config
        self.worker = worker
        """This process's index among ``workers: N`` (``gateway.workers``), else None."""
        self._engine = engine
        config.data_path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        audit_path = config.audit_path if worker is None else worker_audit_path(config.audit_path, worker)
        key = config.audit_signing_key_path
        self.audit = AuditLog(audit_path, fsync=config.audit.fsync, gateway_id=config.gateway_id,
                              rotate_bytes=config.audit.rotate_bytes, signer=load_signer(key) if key else None)
        try:
            self._build(config)
        except BaseException:  # the log holds its lock until closed (gateway.audit_file.lock_log)
            self.audit.close()
            raise

    def _build(self, config: Config) -> None:
        self.authenticator = Authenticator(config.identities)
        self.refusals = RefusalAudit(self.audit)
        """Refusals of callers that may hold no key: one flood allowance for the server (``gateway.auth``)."""
        self.tools = ToolRegistry(config.tools)
        self.engine = self._engine or build_engine(config)
        for line in getattr(getattr(self.engine, "enforced", self.engine), "divergences", list)()[:20]:
            log.warning("policy_engine_divergence", call=line)  # answers may differ from OPA's (policies._divergence)
        self.store = open_store(config)
        self.claims = ExecutionClaims(self.store)
        self.executor = build_execute_stage(config, self.store)
        self.approvals: Any = build_gate(config, store=self.store, audit=self.audit)
        self.credentials: Any = build_credentials(config)
        self.pipeline = Pipeline(
            config=config,
            tools=self.tools,
            engine=self.engine,
            claims=self.claims,
            audit=self.audit,
            approvals=self.approvals,
            credentials=self.credentials,
            executor=self.executor,
        )
        self._sweeper: asyncio.Task[None] | None = None
        self._checkpoints: asyncio.Task[None] | None = None
        self._version_refresh: asyncio.Task[None] | None = None
        self._reloading = asyncio.Lock()  # one reload at a time: a SIGHUP during the watcher's
        self._reloads: set[asyncio.Task[bool]] = set()  # SIGHUP's, held until done

    async def visible_tools(self, identity: Identity) -> list[ToolDescriptor]:
        """Tools the policy lets this caller see (``data.toolgate.visible``); a tool whose check
        fails is hidden. When every check fails (OPA down, a broken rule), ``PolicyError``: an
        empty list would read as "no tools for you" where the truth is "the policy could not say"."""
        visible, decided, failed = [], False, None
        path = self.config.policy.query.rsplit(".", 1)[0] + ".visible"
        for tool in self.tools:
            doc = {"caller": caller_view(identity), "tool": tool.policy_view()}
            try:
                if await self.engine.query(path, doc) is True:
                    visible.append(tool)
                decided = True
            except PolicyError as exc:
                log.warning("visibility_check_failed", tool=tool.name, detail=exc.detail)
                failed = failed or exc
        if failed is not None and not decided:
            raise failed
        return visible

    async def reload_policy(self) -> bool:
        """Reload the policy atomically; a broken policy keeps the old one and logs why."""
        async with self._reloading:
            return await self._reload_policy()

    def reload_policy_soon(self) -> None:
        """``reload_policy`` in a task of its own (a signal handler cannot await)."""
        task = asyncio.get_running_loop().create_task(self.reload_policy())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload_policy(self) -> bool:
        try:
            await self.engine.reload()
        except Exception as exc:
            log.error("policy_reload_failed", error=str(exc))
            self.audit.record("policy_reload", code="policy_reload_failed", error=str(exc)[:2000])
            self.audit.flush()
            return False
        self.audit.record("policy_reload", code="ok", policy_version=self.engine.version)
        self.audit.flush()
        log.info("policy_reloaded", policy_version=self.engine.version)
        return True

    async def sweep_claims(self, now: float | None = None) -> int:
        """Delete finished claims older than ``store.claim_retention_hours`` (audited)."""
        cutoff = (time.time() if now is None else now) - self.config.store.claim_retention_hours * 3600
        deleted = await self.store.prune_claims(cutoff)
        if deleted:
            self.audit.record("claims_pruned", code="ok", deleted=deleted, finished_before=round(cutoff, 3))
            self.audit.flush()
            log.info("claims_pruned", deleted=deleted, finished_before=cutoff)
        return deleted

    def start_sweeper(self, interval: float = SWEEP_INTERVAL_SECONDS) -> None:
        """Sweep old claims now and every ``interval`` seconds until ``close``."""
        if self._sweeper is None:
            # the store may be down for a while: try again next time
            self._sweeper = _repeat(self.sweep_claims, interval, "toolgate-claim-sweeper", "claim_sweep_failed",
                                    first_at_once=True)

    def start_checkpoints(self) -> None:
        """Sign the audit chain every ``audit.checkpoint_seconds`` while records are written
        (``AuditLog.checkpoint``; the last one at ``close``). Nothing without a signing key."""
        async def sign() -> None:
            self.audit.checkpoint()

        if self.audit.signing and self._checkpoints is None:
            # the log cannot be written now: the next turn, or close, signs
            self._checkpoints = _repeat(sign, self.config.audit.checkpoint_seconds, "toolgate-audit-checkpoints",
                                        "audit_checkpoint_failed")

    def start_version_refresh(self, interval: float = OPA_VERSION_SECONDS) -> None:
        """With the opa engine: ask OPA for the version of what it serves now and every
        ``interval`` seconds (``refresh_policy_version``). Nothing for the embedded engine, whose
        bundle changes only by a reload."""
        if self.config.policy.engine == "opa" and self._version_refresh is None:
            self._version_refresh = _repeat(self.refresh_policy_version, interval, "toolgate-policy-version",
                                            "policy_version_refresh_failed", first_at_once=True)

    async def refresh_policy_version(self) -> bool:
        """Ask the OPA server for the version of the policies it serves; when it changed, audit
        ``policy_changed``. OPA loads its bundles itself: the version stood at ``opa:<url>`` until
        a SIGHUP, and calls were audited under it whatever OPA served. True when it changed."""
        enforced = getattr(self.engine, "enforced", self.engine)  # a shadow's candidate is ours to reload
        async with self._reloading:
            before = enforced.version
            await enforced.reload()
            if enforced.version == before:
                return False
            self.audit.record("policy_changed", code="ok", policy_version=enforced.version, previous=before)
            self.audit.flush()
        log.info("policy_changed", policy_version=enforced.version, previous=before)
        return True

    async def close(self, grace: float = 5.0) -> None:
        """Close everything, once the calls still in flight have ended or been stopped (``grace``:
        ``Pipeline.drain``)."""
        await self.pipeline.drain(grace)
        for task in (self._sweeper, self._checkpoints, self._version_refresh):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._sweeper = self._checkpoints = self._version_refresh = None
        for task in list(self._reloads):  # a reload after close would bring a closed engine back
            task.cancel()
        await asyncio.gather(*self._reloads, return_exceptions=True)
        await self.executor.close()
        await self.engine.close()
        await self.store.close()
        self.refusals.close()  # the counts of refusals not written one by one, before the log closes
        self.audit.close()


def _repeat(job: Callable[[], Awaitable[Any]], interval: float, name: str, failed: str, *,
            first_at_once: bool = False) -> asyncio.Task[None]:
    """A task running ``job`` every ``interval`` seconds (the first time at once, or after one
    interval) until cancelled; a run that fails is logged as ``failed`` and the next one goes on."""
    async def forever() -> None:
        if not first_at_once:
            await asyncio.sleep(interval)
        while True:
            try:
                await job()
            except Exception as exc:
                log.error(failed, error=type(exc).__name__, detail=str(exc)[:500])
            await asyncio.sleep(interval)

    return asyncio.get_running_loop().create_task(forever(), name=name)
