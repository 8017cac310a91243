"""``toolgate config check``: what a start with a config would refuse, found without starting.

``load_config`` checks the file itself; a start then reads the policy bundle, the tools' schemas,
the secrets providers, the approvers' and the grant keys, the audit signing key and the TLS files.
Each of those is done here by the same code a start runs, so the two cannot drift, and every
problem is reported, not only the first. Nothing is written and nothing is contacted: no key is
made, the data dir is not created, the port is not bound, OPA and PostgreSQL are not asked.

A finding is an ``error`` (a start would fail: ``cannot_start``) or a ``warning`` (it would start,
but some calls would be refused, or a file is near its end of life).
"""

from __future__ import annotations

import asyncio
import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from gateway.config import Config

EXPIRY_WARNING_DAYS = 30


@dataclass(frozen=True, slots=True)
class Finding:
    level: str
    """``error`` or ``warning``."""
    code: str
    """Stable snake_case."""
    message: str


@dataclass(slots=True)
class Report:
    findings: list[Finding]
    summary: list[str]
    """One line per part that was read, for a person."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]


def check_config(config: Config) -> Report:
    report = Report([], [])
    for check in (_tools, _policy, _credentials, _approvals, _audit, _tls, _paths):
        for item in check(config):
            (report.findings.append if isinstance(item, Finding) else report.summary.append)(item)
    return report


def _error(code: str, exc: BaseException | str) -> Finding:
    return Finding("error", code, str(exc).strip() or type(exc).__name__)


def _guarded(code: str, read: Callable[[], Any]) -> tuple[Any, Finding | None]:
    """``read()`` and None, or None and the error it raised as a finding with ``code``."""
    try:
        return read(), None
    except Exception as exc:  # whatever a start would have stopped on
        return None, _error(code, exc)


def _tools(config: Config) -> Iterator[Finding | str]:
    from gateway.tools import ToolRegistry

    registry, problem = _guarded("tool_schema_invalid", lambda: ToolRegistry(config.tools))
    if problem:
        yield problem
        return
    yield f"tools: {len(registry)} ({', '.join(t.name for t in registry) or 'none'})"


def _policy(config: Config) -> Iterator[Finding | str]:
    from policies import build_engine

    engine, problem = _guarded("policy_bundle_invalid", lambda: build_engine(config))
    if problem:
        yield problem
        return
    try:
        if config.policy.engine == "opa":
            yield "policy: the opa engine (the server is not contacted; its bundle is OPA's to load)"
        else:
            yield f"policy: embedded, bundle {config.policy_bundle_path} (version {engine.version})"
            primary = getattr(engine, "enforced", engine)
            yield from (Finding("warning", "engine_divergence", line) for line in primary.divergences())
        if config.policy.shadow_bundle:
            yield f"policy: shadow bundle {config.resolve(config.policy.shadow_bundle)} loads"
    finally:
        asyncio.run(engine.close())


def _credentials(config: Config) -> Iterator[Finding | str]:
    from gateway.credentials import SecretKey, SecretResolver, build_credentials

    _, problem = _guarded("credentials_invalid", lambda: build_credentials(config))
    if problem:
        yield problem
        return
    needing = [t for t in config.tools if t.credentials]
    if not config.secrets:
        yield from (Finding("warning", "credential_unavailable", f"tool {t.name} needs credentials and no secrets "
                            "provider is configured: its calls are refused") for t in needing)
        return
    resolver = SecretResolver.from_config(config.secrets, config.base_dir)
    tenants = sorted({i.tenant for i in config.identities if "agent" in i.roles})
    for tool in needing:
        for tenant in tenants:
            for ref in tool.credentials:
                if resolver.lookup(SecretKey(tenant, ref.secret, "")) is None:
                    yield Finding("warning", "credential_unavailable", (
                        f"tool {tool.name}: tenant {tenant} has no secret {ref.secret} (as this process sees the "
                        "providers): its calls are refused unless the policy names a credential_variant that exists"))
    yield f"credentials: {len(needing)} tool(s) need them, {len(tenants)} tenant(s) may call"


def _approvals(config: Config) -> Iterator[Finding | str]:
    from gateway.approvals.config import approvals_config
    from gateway.approvals.keyring import approver_keyring, check_grant_keys

    settings = approvals_config(config)
    keyring, problem = _guarded("approvals_invalid", lambda: approver_keyring(settings))
    if problem:
        yield problem
    made, problem = _guarded("grant_key_invalid", lambda: check_grant_keys(config))
    if problem:
        yield problem
    if keyring is not None and made is not None:
        note = "; the first grant key is made at the first start" if made else ""
        yield f"approvals: {len(keyring.owners)} approver(s), {len(settings.grant_keys)} grant key(s){note}"


def _audit(config: Config) -> Iterator[Finding | str]:
    from gateway.audit_sign import read_signer

    key = config.audit_signing_key_path
    if key is None:
        yield f"audit: {config.audit_path}, checkpoints unsigned"
    elif not key.exists():
        yield f"audit: {config.audit_path}, its signing key {key} is made at the first start"
    else:
        _, problem = _guarded("audit_signing_key_invalid", lambda: read_signer(key))
        yield problem or f"audit: {config.audit_path}, checkpoints signed with {key}"


def _tls(config: Config) -> Iterator[Finding | str]:
    from gateway.tls_files import load_tls_files

    if config.tls is None:
        yield "tls: off (plaintext: serve only on loopback or behind a TLS proxy)"
        return
    files, problem = _guarded("tls_file_invalid", lambda: load_tls_files(config))
    if problem:
        yield problem
        return
    left = files.not_after - datetime.datetime.now(datetime.timezone.utc)
    if left.total_seconds() <= 0:
        yield Finding("warning", "tls_certificate_expired",
                      f"tls.cert_file: the certificate expired on {files.not_after:%Y-%m-%d %H:%M} UTC: clients refuse it")
    elif left.days < EXPIRY_WARNING_DAYS:
        yield Finding("warning", "tls_certificate_expiring",
                      f"tls.cert_file: the certificate expires on {files.not_after:%Y-%m-%d %H:%M} UTC")
    yield f"tls: on{', client certificates required' if files.client_ca else ''}"


def _paths(config: Config) -> Iterator[Finding | str]:
    places = {"data_dir": config.data_path, "audit.path": config.audit_path.parent}
    if config.store.kind == "sqlite":
        places["store.path"] = config.store_path.parent
    for setting, folder in places.items():
        if (why := _unwritable(folder)):
            yield Finding("warning", "path_unwritable", f"{setting}: {folder} {why} (for this user; the gateway's may differ)")
    yield f"store: {config.store.kind}" + (f" {config.store_path}" if config.store.kind == "sqlite" else
                                            " (not contacted)")


def _unwritable(folder: Path) -> str:
    """Why files cannot be made in ``folder`` (or in it once its missing parents are made), or ""."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be made: {existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "is not writable" if existing == folder else f"cannot be made: {existing} is not writable"
    return ""
