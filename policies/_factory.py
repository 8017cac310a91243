"""Choosing the engine from the gateway configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies._protocol import PolicyEngine

if TYPE_CHECKING:
    from gateway.config import Config


def build_engine(config: Config) -> PolicyEngine:
    """The engine ``config.policy`` asks for, loaded and ready.

    embedded: the bundle at ``config.policy_bundle_path`` compiled in-process.
    opa: a client for the OPA server at ``config.policy.opa_url`` (OPA loads the bundle),
    trusting only ``config.policy.opa_ca_file`` for an https URL when that is set.
    With ``policy.shadow_bundle`` set, the engine is wrapped in a ``ShadowEngine`` whose
    candidate is that bundle on the embedded engine.
    Raises ``PolicyLoadError`` when the embedded bundle does not load.
    """
    enforced = _primary(config)
    if not config.policy.shadow_bundle:
        return enforced
    from policies.embedded import EmbeddedEngine
    from policies.shadow import ShadowEngine

    candidate = EmbeddedEngine.from_bundle(
        config.resolve(config.policy.shadow_bundle),
        query=config.policy.query,
        timeout_ms=config.policy.timeout_ms,
    )
    return ShadowEngine(enforced, candidate)


def _primary(config: Config) -> PolicyEngine:
    policy = config.policy
    if policy.engine == "embedded":
        from policies.embedded import EmbeddedEngine

        return EmbeddedEngine.from_bundle(config.policy_bundle_path, query=policy.query, timeout_ms=policy.timeout_ms)
    if policy.engine == "opa":
        from policies.opa import OPAEngine

        ca_file = config.resolve(policy.opa_ca_file) if policy.opa_ca_file else None
        return OPAEngine(policy.opa_url, query=policy.query, timeout_ms=policy.timeout_ms, ca_file=ca_file)
    raise ValueError(f"unknown policy engine {policy.engine!r}")
