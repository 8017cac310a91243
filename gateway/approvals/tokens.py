"""Compact JWS tokens of the approval flow: approvals, rejections (both signed by approvers)
and grants (signed by the gateway).

Verification reads nothing from the payload before the signature is checked: the header is
parsed (``_unverified_header``) only to check ``alg`` is exactly ``EdDSA``, ``typ`` is the
expected token type and to look the ``kid`` up in the key ring given by the caller (never a
key from the token). Then PyJWS verifies with an EdDSA-only allow-list, then the claims are
parsed strictly and checked in DESIGN.md's order. Whatever goes wrong raises one exception,
``TokenRejected``, whose ``str`` is opaque; ``reason`` is for the audit log and ``code`` is
``invalid_approval`` except for changed arguments (``approval_args_mismatch``). A lifetime
(``exp - iat``) out of bounds raises the subclass ``LifetimeRejected``, alike at this level but
with the bound in typed fields: a caller that may say more (the approval service, to an
approver whose signature verified) can name it. An expired token raises the subclass
``TokenExpired``; ``check_claims_excusing_expiry`` (every check but ``exp``) exists only for the
gate to answer a grant already claimed from its claim, never to authorize anything.
"""

from __future__ import annotations

import base64
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

import jwt
import rfc8785

from gateway.approvals.keyring import Keyring, SigningKey
from gateway.arguments import ArgumentsError, parse_strict
from gateway.codes import Code

ALGORITHM = "EdDSA"
TYP_APPROVAL = "toolgate-approval+jwt"
TYP_REJECTION = "toolgate-rejection+jwt"
TYP_GRANT = "toolgate-grant+jwt"
MAX_TOKEN_BYTES = 16 * 1024
_HEADER_FIELDS = frozenset({"alg", "kid", "typ"})
_JWS = jwt.PyJWS(algorithms=[ALGORITHM])

_STR = ("iss", "sub", "aud", "tool", "args_hash", "tenant", "run_id", "jti")
_INT = ("iat", "exp")
_MAY_BE_EMPTY = frozenset({"run_id", "user"})  # a run or a user is optional; nothing else is
_EXTRA: dict[str, dict[str, type]] = {
    TYP_APPROVAL: {},
    TYP_REJECTION: {"reason": str},
    TYP_GRANT: {"agent": str, "user": str, "nbf": int, "approvers": list, "approver_keys": list, "groups": list},
}


class TokenRejected(Exception):
    """A token failed verification. Opaque outward; ``reason`` goes to the audit log only."""

    def __init__(self, reason: str, code: Code = Code.INVALID_APPROVAL) -> None:
        super().__init__("invalid approval")
        self.reason = reason
        self.code = code


class LifetimeRejected(TokenRejected):
    """The token's lifetime ``exp - iat`` is not within (0, ``max_lifetime``] seconds. Raised
    only once the signature verified; as opaque as its parent unless a caller names the bound."""

    def __init__(self, lifetime: int, max_lifetime: int) -> None:
        super().__init__(f"lifetime exp-iat={lifetime}s is outside (0, {max_lifetime}]")
        self.lifetime = lifetime
        self.max_lifetime = max_lifetime


class TokenExpired(TokenRejected):
    """The token's ``exp`` (and the skew) has passed. Raised only once the signature verified;
    as opaque as its parent unless a caller says so (a grant: ``approval_expired``)."""


@dataclass(frozen=True, slots=True)
class Expected:
    """What a token must be bound to: the approval request it is for (and its grant rules)."""

    audience: str
    approval_id: str
    tool: str
    tenant: str
    run_id: str
    args_hash: str
    groups_any: tuple[str, ...] = ()
    not_issuers: tuple[str, ...] = ()  # the requesting user and agent: no self-approval
    agent: str = ""  # grants: the requesting agent
    user: str = ""  # grants: the user it acts for ("" for none)


@dataclass(frozen=True, slots=True)
class Limits:
    skew: int
    max_lifetime: int


@dataclass(frozen=True, slots=True)
class Verified:
    kid: str
    issuer: str
    claims: dict[str, Any] = field(hash=False)

    @property
    def jti(self) -> str:
        return self.claims["jti"]


def sign(claims: dict[str, Any], key: SigningKey, typ: str) -> str:
    """Sign ``claims`` (serialized as RFC 8785 canonical JSON) as a compact JWS."""
    if typ not in _EXTRA:
        raise ValueError(f"unknown token type {typ!r}")
    return _JWS.encode(rfc8785.dumps(claims), key.key, algorithm=ALGORITHM, headers={"kid": key.kid, "typ": typ})


def verify(token: str, *, typ: str, keyring: Keyring, expected: Expected, now: int, limits: Limits) -> Verified:
    """Verify signature, then claims, in DESIGN.md's order; raise TokenRejected."""
    return check_claims(verify_signature(token, typ=typ, keyring=keyring), typ=typ, keyring=keyring,
                        expected=expected, now=now, limits=limits)


def check_claims(verified: Verified, *, typ: str, keyring: Keyring, expected: Expected, now: int,
                 limits: Limits) -> Verified:
    """The claim checks of ``verify`` on a token ``verify_signature`` already accepted.

    For a caller that needed the signed claims first (the gate looks up the approval a grant
    names before it knows what to expect) and must not pay for the signature twice.
    """
    return _checked(verified, typ, keyring, expected, now, limits, expiry=True)


def check_claims_excusing_expiry(verified: Verified, *, typ: str, keyring: Keyring, expected: Expected, now: int,
                                 limits: Limits) -> Verified:
    """Every check of ``check_claims`` but ``exp``: the lifetime bounds, ``nbf``, the binding and
    the args hash. Dangerous: a token that passes may have expired, so it never authorizes
    anything. Only for a grant whose ``jti`` a call has already claimed (it was valid when first
    presented): the gate answers it from that claim, never by executing (``gateway.approvals.gate``).
    """
    return _checked(verified, typ, keyring, expected, now, limits, expiry=False)


def _checked(verified: Verified, typ: str, keyring: Keyring, expected: Expected, now: int, limits: Limits, *,
             expiry: bool) -> Verified:
    c = verified.claims
    _check_time(c, now, limits, expiry=expiry)
    _check_binding(c, expected, typ)
    if not hmac.compare_digest(c["args_hash"].encode(), expected.args_hash.encode()):
        raise TokenRejected("args_hash differs from the arguments presented", Code.APPROVAL_ARGS_MISMATCH)
    if typ != TYP_GRANT:
        _check_approver(verified.issuer, keyring, expected)
    return verified


def verify_signature(token: str, *, typ: str, keyring: Keyring) -> Verified:
    """Check header, kid and signature; only then parse the claims strictly and check ``iss``."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_BYTES:
        raise TokenRejected("token missing or too large")
    header = _unverified_header(token)
    if header.get("alg") != ALGORITHM:
        raise TokenRejected(f"alg {str(header.get('alg'))[:32]!r} is not allowed")
    if header.get("typ") != typ:
        raise TokenRejected(f"typ {str(header.get('typ'))[:40]!r} is not {typ}")
    if set(header) - _HEADER_FIELDS:
        raise TokenRejected(f"unexpected header fields {sorted(set(header) - _HEADER_FIELDS)[:5]}")
    entry = keyring.get(header.get("kid"))
    if entry is None:
        raise TokenRejected(f"kid {str(header.get('kid'))[:64]!r} is not in the key ring")
    try:
        payload = _JWS.decode_complete(token, key=entry.key, algorithms=[ALGORITHM])["payload"]
    except jwt.InvalidTokenError as exc:
        raise TokenRejected(f"signature: {type(exc).__name__}") from exc
    claims = _claims(payload, typ)
    if claims["iss"] != entry.owner:
        raise TokenRejected(f"iss {claims['iss'][:64]!r} does not own key {entry.kid!r}")
    return Verified(entry.kid, entry.owner, claims)


def _unverified_header(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise TokenRejected("not a compact JWS")
    try:
        raw = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4))
        header = parse_strict(raw, max_bytes=1024, what="header", numbers_as_hashed=False)
    except (ValueError, ArgumentsError) as exc:
        raise TokenRejected("header is not a strict JSON object") from exc
    return header


def _claims(payload: bytes, typ: str) -> dict[str, Any]:
    try:
        claims = parse_strict(payload, max_bytes=MAX_TOKEN_BYTES, what="claims", numbers_as_hashed=False)
    except ArgumentsError as exc:
        raise TokenRejected("claims are not a strict JSON object") from exc
    wanted: dict[str, type] = {**{k: str for k in _STR}, **{k: int for k in _INT}, **_EXTRA[typ]}
    for name, kind in wanted.items():
        value = claims.get(name)
        if type(value) is not kind or (kind is str and not value and name not in _MAY_BE_EMPTY):
            raise TokenRejected(f"claim {name} missing or not a {kind.__name__}")
    if "nbf" in claims and type(claims["nbf"]) is not int:
        raise TokenRejected("claim nbf is not an integer")
    for name in ("approvers", "approver_keys", "groups"):
        if name in claims and (type(claims[name]) is not list or not all(isinstance(v, str) and v for v in claims[name])):
            raise TokenRejected(f"claim {name} must list strings")
    return claims


def _check_time(c: dict[str, Any], now: int, limits: Limits, *, expiry: bool = True) -> None:
    if c["exp"] <= c["iat"] or c["exp"] - c["iat"] > limits.max_lifetime:
        raise LifetimeRejected(c["exp"] - c["iat"], limits.max_lifetime)
    if expiry and now >= c["exp"] + limits.skew:
        raise TokenExpired(f"expired at {c['exp']} (now {now}, skew {limits.skew})")
    not_before = max(c["iat"], c.get("nbf", c["iat"]))
    if not_before > now + limits.skew:
        raise TokenRejected(f"not valid before {not_before} (now {now}, skew {limits.skew})")


def _check_binding(c: dict[str, Any], e: Expected, typ: str) -> None:
    pairs = [("aud", e.audience), ("sub", e.approval_id), ("tool", e.tool), ("tenant", e.tenant), ("run_id", e.run_id)]
    if typ == TYP_GRANT:
        pairs += [("agent", e.agent), ("user", e.user)]
    for name, want in pairs:
        if not hmac.compare_digest(c[name].encode(), want.encode()):
            raise TokenRejected(f"{name} {c[name][:64]!r} does not match {want[:64]!r}")


def _check_approver(issuer: str, keyring: Keyring, e: Expected) -> None:
    if not keyring.groups_of(issuer) & set(e.groups_any):
        raise TokenRejected(f"approver {issuer!r} is in none of the required groups {list(e.groups_any)}")
    if issuer in e.not_issuers:
        raise TokenRejected(f"approver {issuer!r} requested the call (self-approval)")


def unverified_claims(token: str) -> dict[str, Any]:
    """Decode a token's claims WITHOUT checking anything: for display and debugging only."""
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
