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

import base64
import binascii
import re
from typing import Any, Iterable

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.config import Config, ConfigError, IdentityConfig
from gateway.config_checks import Problem, problem, refuse

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
    """The raw 32-byte Ed25519 public key, base64 (standard or url-safe, padded or not)."""
    public_key_pem: str = ""
    """Or: the public key as PEM (SubjectPublicKeyInfo)."""

    @model_validator(mode="after")
    def _one_form(self) -> "ApproverKey":
        if bool(self.public_key) == bool(self.public_key_pem):
            raise ValueError("give exactly one of public_key (base64) or public_key_pem")
        return self

    @model_validator(mode="after")
    def _key_decodes(self) -> "ApproverKey":
        """The key is read here, as the keyring will read it (``approver_public_key``), so a key that
        is not one is refused at load, naming its setting, not when the gateway starts."""
        try:
            approver_public_key(self.public_key, self.public_key_pem)
        except ValueError as exc:
            field = "public_key" if self.public_key else "public_key_pem"
            refuse("ApproverKey", [problem((field,), "approver_key_invalid", "key '{kid}': {why}",
                                           kid=self.kid, why=str(exc))])
        return self


_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}\Z")
_KEY_FORM = ("give the raw 32-byte Ed25519 public key in base64 (43 characters, or 44 ending in '='), as "
             "'toolgate keys new' prints it, or the key in PEM as public_key_pem")


def approver_public_key(public_key: str = "", public_key_pem: str = "") -> Ed25519PublicKey:
    """The Ed25519 public key of an ``approvals.approvers[].keys[]`` entry: ``public_key_pem`` when
    given, else ``public_key`` (base64, standard or url-safe alphabet, padding optional). ValueError
    saying what is wrong without repeating the text. Both the validation and the keyring read
    keys with this, so a key that loads is the key that verifies."""
    if public_key_pem:
        return _pem_public_key(public_key_pem)
    text = public_key.strip()
    try:
        if not _BASE64.match(text):
            raise binascii.Error("a character outside the base64 alphabets")
        raw = base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise ValueError(f"public_key is not base64; {_KEY_FORM}") from None
    if len(raw) != 32:
        raise ValueError(f"public_key decodes to {len(raw)} bytes, and a raw Ed25519 public key is 32; {_KEY_FORM}")
    return Ed25519PublicKey.from_public_bytes(raw)


def _pem_public_key(text: str) -> Ed25519PublicKey:
    if "PRIVATE KEY" in text:
        raise ValueError("public_key_pem holds a private key: give only its public half "
                         "(openssl pkey -in KEY -pubout), and keep the private key with its approver")
    try:
        key = serialization.load_pem_public_key(text.encode())
    except UnsupportedAlgorithm:
        raise ValueError("public_key_pem holds a key of an algorithm this gateway cannot read; approver keys "
                         "are Ed25519 (make one with 'toolgate keys new')") from None
    except ValueError:
        raise ValueError("public_key_pem is not a public key in PEM (-----BEGIN PUBLIC KEY----- ...); give the "
                         "Ed25519 public key as PEM, or the raw key in base64 as public_key") from None
    if not isinstance(key, Ed25519PublicKey):
        kind = type(key).__name__.removeprefix("_").removesuffix("PublicKey") or "another kind"
        raise ValueError(f"public_key_pem holds a public key of type {kind}, not Ed25519: approver keys are "
                         "Ed25519 (make one with 'toolgate keys new')")
    return key


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
        """Approver ids and kids are unique (each repeat refused where it is); a grant key is listed."""
        found: list[Problem] = []
        ids: dict[str, int] = {}
        kids: dict[str, tuple[int, int]] = {}
        for i, approver in enumerate(self.approvers):
            if (at := ids.setdefault(approver.id, i)) != i:
                found.append(problem(("approvers", i, "id"), "approver_id_repeated", "approver '{id}' is also "
                                     "approvers.{at}: approver ids must be unique", id=approver.id, at=at))
            for j, key in enumerate(approver.keys):
                if (first := kids.setdefault(key.kid, (i, j))) != (i, j):
                    found.append(problem(("approvers", i, "keys", j, "kid"), "kid_repeated", "kid '{kid}' is also "
                                         "approvers.{i}.keys.{j}: key ids (kid) must be unique across the keyring",
                                         kid=key.kid, i=first[0], j=first[1]))
        if not self.grant_keys:
            found.append(problem(("grant_keys",), "grant_keys_empty", "needs at least one file"))
        refuse("ApprovalsConfig", found)
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
