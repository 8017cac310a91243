"""Regenerate the token vectors in this folder: ``python tests/vectors/tokens/generate.py``.

Keys are derived from fixed seeds (TEST ONLY, public) and Ed25519 is deterministic, so the
output is stable. Each case is one JSON file: the token, the fixed ``now``, the request it
is checked against, the arguments presented (raw JSON text, hashed by the test) and the
expected outcome code. ``keyring.json`` holds the verifying keys and groups.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

HERE = Path(__file__).parent
T0 = 1_700_000_000
SKEW, MAX_LIFETIME = 30, 3600
ARGS = {"path": "a.txt", "content": "hi"}
GROUPS = {"alice": ["ops"], "bob": ["ops"], "carol": ["finance"], "dana": ["ops"]}
REQUEST = {
    "audience": "toolgate-test", "approval_id": "apr-1", "tool": "write_file", "tenant": "acme",
    "run_id": "run-1", "groups_any": ["ops"], "not_issuers": ["dana", "demo-agent"],
}


def key(name: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"toolgate-test-vector-{name}".encode()).digest())


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def args_hash(args: Any) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(args)).hexdigest()


def claims(**over: Any) -> dict[str, Any]:
    c = {"iss": "alice", "sub": "apr-1", "aud": "toolgate-test", "tool": "write_file", "args_hash": args_hash(ARGS),
         "tenant": "acme", "run_id": "run-1", "iat": T0, "exp": T0 + 600, "jti": "jti-1"}
    c.update(over)
    return c


def token(c: dict[str, Any] | bytes, *, signer: str = "alice", kid: str = "alice-1",
          alg: str = "EdDSA", typ: str = "toolgate-approval+jwt") -> str:
    header = b64(json.dumps({"alg": alg, "kid": kid, "typ": typ}, separators=(",", ":")).encode())
    payload = b64(c if isinstance(c, bytes) else rfc8785.dumps(c))
    signing_input = f"{header}.{payload}".encode()
    return f"{header}.{payload}.{b64(key(signer).sign(signing_input))}"


def hs256(secret: bytes) -> str:
    header = b64(b'{"alg":"HS256","kid":"alice-1","typ":"toolgate-approval+jwt"}')
    payload = b64(rfc8785.dumps(claims()))
    mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(mac)}"


def tamper_payload(tok: str) -> str:
    h, _, s = tok.split(".")
    return f"{h}.{b64(rfc8785.dumps(claims(tool='delete_file')))}.{s}"


def tamper_signature(tok: str) -> str:
    h, p, s = tok.split(".")
    sig = bytearray(base64.urlsafe_b64decode(s + "=="))
    sig[10] ^= 0x01
    return f"{h}.{p}.{b64(bytes(sig))}"


def public_raw(name: str) -> bytes:
    return key(name).public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


OK, INVALID, MISMATCH = "ok", "invalid_approval", "approval_args_mismatch"
PRESENTED = '{"path":"a.txt","content":"hi"}'
NOW = T0 + 60


def cases() -> dict[str, dict[str, Any]]:
    good = token(claims())
    none_header = b64(b'{"alg":"none","kid":"alice-1","typ":"toolgate-approval+jwt"}')
    c: dict[str, dict[str, Any]] = {
        "valid": {"token": good},
        "args_key_reordered": {"token": good, "presented": '{"content":"hi","path":"a.txt"}'},
        "args_whitespace": {"token": good, "presented": '{ "path" : "a.txt",\n  "content":"hi" }'},
        "args_escaped_unicode_same_value": {"token": good, "presented": '{"path":"a\\u002etxt","content":"hi"}'},
        "tampered_payload": {"token": tamper_payload(good), "expect": INVALID},
        "tampered_signature": {"token": tamper_signature(good), "expect": INVALID},
        "wrong_key": {"token": token(claims(), signer="mallory"), "expect": INVALID},
        "unknown_kid": {"token": token(claims(), signer="mallory", kid="mallory-1"), "expect": INVALID},
        "alg_none_empty_signature": {"token": f"{none_header}.{b64(rfc8785.dumps(claims()))}.", "expect": INVALID},
        "alg_none_with_signature": {"token": token(claims(), alg="none"), "expect": INVALID},
        "hs256_with_raw_public_key": {"token": hs256(public_raw("alice")), "expect": INVALID},
        "hs256_with_pem_public_key": {"token": hs256(key("alice").public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)), "expect": INVALID},
        "expired": {"token": good, "now": T0 + 600 + SKEW, "expect": INVALID},
        "expired_skew_boundary_inside": {"token": good, "now": T0 + 600 + SKEW - 1},
        "not_yet_valid": {"token": token(claims(iat=NOW + SKEW + 1, exp=NOW + 600)), "expect": INVALID},
        "not_yet_valid_skew_boundary_inside": {"token": token(claims(iat=NOW + SKEW, exp=NOW + 600))},
        "nbf_in_future": {"token": token(claims(nbf=NOW + SKEW + 1)), "expect": INVALID},
        "lifetime_too_long": {"token": token(claims(exp=T0 + MAX_LIFETIME + 1)), "expect": INVALID},
        "wrong_aud": {"token": token(claims(aud="other-gateway")), "expect": INVALID},
        "wrong_sub": {"token": token(claims(sub="apr-2")), "expect": INVALID},
        "wrong_tenant": {"token": token(claims(tenant="globex")), "expect": INVALID},
        "wrong_tool": {"token": token(claims(tool="delete_file")), "expect": INVALID},
        "wrong_run": {"token": token(claims(run_id="run-2")), "expect": INVALID},
        "args_value_changed": {"token": good, "presented": '{"path":"b.txt","content":"hi"}', "expect": MISMATCH},
        "args_added_key": {"token": good, "presented": '{"path":"a.txt","content":"hi","mode":"append"}', "expect": MISMATCH},
        "args_unicode_lookalike": {"token": good, "presented": '{"path":"\u0430.txt","content":"hi"}', "expect": MISMATCH},
        "approver_outside_required_group": {"token": token(claims(iss="carol"), signer="carol", kid="carol-1"), "expect": INVALID},
        "self_approval": {"token": token(claims(iss="dana"), signer="dana", kid="dana-1"), "expect": INVALID},
        "iss_not_owner_of_kid": {"token": token(claims(iss="bob")), "expect": INVALID},
        "grant_typ_signed_by_approver": {"token": token(claims(), typ="toolgate-grant+jwt"), "expect": INVALID},
        "missing_typ": {"token": token(claims(), typ=""), "expect": INVALID},
        "duplicate_claim": {"token": token(rfc8785.dumps(claims())[:-1] + b',"tool":"delete_file"}'), "expect": INVALID},
        "iat_not_integer": {"token": token(claims(iat=T0 + 0.5)), "expect": INVALID},
        "not_a_jws": {"token": "not.a-token", "expect": INVALID},
        "approvers_claim_not_a_list": {"token": token(claims(approvers=5)), "expect": INVALID},
    }
    for case in c.values():
        case.setdefault("now", NOW)
        case.setdefault("presented", PRESENTED)
        case.setdefault("expect", OK)
        case["typ"] = "toolgate-approval+jwt"
        case["request"] = REQUEST
    return c


def quorum_cases() -> dict[str, dict[str, Any]]:
    alice1 = token(claims(jti="q-1"))
    alice2 = token(claims(jti="q-2"))
    bob = token(claims(iss="bob", jti="q-3"), signer="bob", kid="bob-1")
    return {
        "quorum2_same_approver_twice": {"tokens": [alice1, alice2], "results": [OK, OK], "status": "pending"},
        "quorum2_replayed_token": {"tokens": [alice1, alice1], "results": [OK, INVALID], "status": "pending"},
        "quorum2_two_approvers": {"tokens": [alice1, bob], "results": [OK, OK], "status": "approved"},
    }


def main() -> None:
    keyring = {"skew": SKEW, "max_lifetime": MAX_LIFETIME, "approvers": [
        {"id": n, "groups": g, "keys": [{"kid": f"{n}-1", "public_key": base64.b64encode(public_raw(n)).decode()}]}
        for n, g in GROUPS.items()]}
    (HERE / "keyring.json").write_text(json.dumps(keyring, indent=2) + "\n")
    for folder, found in (("single", cases()), ("quorum", quorum_cases())):
        (HERE / folder).mkdir(exist_ok=True)
        for old in (HERE / folder).glob("*.json"):
            old.unlink()
        for name, case in found.items():
            if folder == "quorum":
                case.update(now=NOW, presented=PRESENTED, request={**REQUEST, "quorum": 2}, typ="toolgate-approval+jwt")
            (HERE / folder / f"{name}.json").write_text(json.dumps({"name": name, **case}, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
