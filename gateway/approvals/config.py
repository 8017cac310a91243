"""The ``approvals:`` section of the gateway config, validated here (``Config.approvals`` is a dict).

Example::

    approvals:
      grant_keys: [keys/grant-1.pem]      # newest first signs; all verify; generated if absent
      grant_ttl_seconds: 120
      clock_skew_seconds: 30
      approvers:
        - id: alice
          groups: [ops]
          keys:
            - {kid: alice-2024, public_key: "<raw Ed25519 key, base64>"}
            - {kid: alice-2023, public_key_pem: "-----BEGIN PUBLIC KEY-----..."}
"""

from __future__ import annotations

from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.config import Config, ConfigError, IdentityConfig

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$"
MIN_APPROVAL_LIFETIME, MAX_APPROVAL_LIFETIME = 60, 86400
"""The bounds of ``max_approval_lifetime_seconds``: every gateway accepts an approver token living
``MIN_APPROVAL_LIFETIME`` seconds or less, none one living more than ``MAX_APPROVAL_LIFETIME``."""
DEFAULT_APPROVAL_LIFETIME = 3600
"""The default ``max_approval_lifetime_seconds``."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApproverKey(_Strict):
    kid: str = Field(pattern=_ID)
    """Key id, carried in the approval token's header; unique across the keyring."""
    public_key: str = ""
    """The raw 32-byte Ed25519 public key, base64 (standard or url-safe)."""
    public_key_pem: str = ""
    """Or: the public key as PEM (SubjectPublicKeyInfo)."""

    @model_validator(mode="after")
    def _one_form(self) -> "ApproverKey":
        if bool(self.public_key) == bool(self.public_key_pem):
            raise ValueError("give exactly one of public_key (base64) or public_key_pem")
        return self


class ApproverConfig(_Strict):
    id: str = Field(pattern=_ID)
    """The approver id: the ``iss`` of their approvals and the ``approver`` of their API identity."""
    groups: list[str] = Field(default_factory=list)
    """Groups the approver belongs to (policies require ``groups_any``)."""
    keys: list[ApproverKey] = Field(min_length=1)
    """Public keys; several during a rotation. Any listed key verifies."""


class ApprovalsConfig(_Strict):
    approvers: list[ApproverConfig] = Field(default_factory=list)
    """The approver keyring."""
    grant_keys: list[str] = Field(default_factory=lambda: ["grant-signing.pem"])
    """Gateway grant-signing key files (PEM, Ed25519); the first signs, all verify. Relative
    paths resolve against the data dir; a missing first file is generated on start."""
    grant_ttl_seconds: int = Field(default=120, ge=5, le=3600)
    """Lifetime of an issued grant (never beyond the request's expiry)."""
    clock_skew_seconds: int = Field(default=30, ge=0, le=300)
    """Tolerated clock difference when checking iat/nbf/exp."""
    max_approval_lifetime_seconds: int = Field(default=DEFAULT_APPROVAL_LIFETIME, ge=MIN_APPROVAL_LIFETIME,
                                               le=MAX_APPROVAL_LIFETIME)
    """An approver's token may not be valid for longer than this (exp - iat)."""
    watch_queue_size: int = Field(default=256, ge=8, le=65536)
    """Events buffered per Watch stream before a slow watcher is dropped."""

    @model_validator(mode="after")
    def _unique(self) -> "ApprovalsConfig":
        ids = [a.id for a in self.approvers]
        kids = [k.kid for a in self.approvers for k in a.keys]
        for what, names in (("approver ids", ids), ("key ids (kid)", kids)):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{what} must be unique, repeated: {', '.join(dupes)}")
        if not self.grant_keys:
            raise ValueError("grant_keys needs at least one file")
        return self


def approver_identity_problems(identities: Iterable[IdentityConfig],
                               settings: ApprovalsConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """What keeps an identity with role ``approver`` from approving, as (field, message): its
    ``approver`` id must be one of ``approvals.approvers`` (whose keys verify its tokens), and its
    ``user`` (which ``gateway.auth`` takes for it) none other; else each of its votes is refused."""
    known = [a.id for a in settings.approvers]
    listed = ", ".join(known) if known else "it lists none"
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for i, ident in enumerate(identities):
        if "approver" not in ident.roles:
            continue
        if not ident.approver:
            problems.append((("identities", i, "approver"), f"identity '{ident.name}' has role approver but no "
                             f"approver id; set approver: to its id in approvals.approvers ({listed})"))
        elif ident.approver not in known:
            problems.append((("identities", i, "approver"), f"identity '{ident.name}': approver '{ident.approver}' "
                             f"is not in approvals.approvers ({listed}); add it with its public keys, or fix the id"))
        elif ident.user and ident.user != ident.approver:
            problems.append((("identities", i, "user"), f"identity '{ident.name}': an approver acts as its user, "
                             f"so its votes would be taken as '{ident.user}''s, not '{ident.approver}''s and "
                             "refused; remove user"))
    return problems


def approvals_config(config: Config) -> ApprovalsConfig:
    """Validate ``config.approvals``; raise ConfigError naming the field."""
    raw: Any = config.approvals or {}
    try:
        return ApprovalsConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"approvals.{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from exc
