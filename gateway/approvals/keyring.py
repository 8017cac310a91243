"""Key rings: approver public keys (verify only) and the gateway's grant-signing keys.

Approver keys are looked up by ``kid`` only: the key never comes from the token, and the
kid also names its owner, so an approval's ``iss`` must be the owner of the key that signed
it. Grant keys: the first file signs, every listed file verifies (rotation = prepend a new
file, keep the old one until the grants it signed have expired).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gateway.approvals.config import ApprovalsConfig, ApproverKey, approvals_config, approver_public_key
from gateway.config import in_data_dir
from gateway.key_files import KeyFileExposed, read_key_file


@dataclass(frozen=True, slots=True)
class VerifyKey:
    kid: str
    owner: str
    key: Ed25519PublicKey


class Keyring:
    """kid → (owner, public key). ``get`` returns None for an unknown kid."""

    def __init__(self, keys: list[VerifyKey], groups: dict[str, frozenset[str]] | None = None) -> None:
        self._keys = {k.kid: k for k in keys}
        if len(self._keys) != len(keys):
            raise ValueError("duplicate kid in keyring")
        self._groups = groups or {}
        self._refs = {k.kid: key_ref(k) for k in keys}
        self._held = {(k.owner, self._refs[k.kid]) for k in keys}

    def get(self, kid: object) -> VerifyKey | None:
        return self._keys.get(kid) if isinstance(kid, str) else None

    def ref_of(self, kid: str) -> str:
        """The key ``kid`` names, as a vote records it (``key_ref``); "" for a kid not in the ring."""
        return self._refs.get(kid, "")

    def holds(self, owner: str, ref: object) -> bool:
        """Whether ``owner`` still has the key ``ref`` names (``key_ref``): a vote or a grant made with a
        key since removed, or a kid since given to another key, counts no longer."""
        return isinstance(ref, str) and (owner, ref) in self._held

    def groups_of(self, owner: str) -> frozenset[str]:
        return self._groups.get(owner, frozenset())

    @property
    def owners(self) -> list[str]:
        return sorted(self._groups)

    def members_of(self, groups: list[str] | tuple[str, ...]) -> list[str]:
        wanted = set(groups)
        return sorted(o for o, g in self._groups.items() if g & wanted)


def key_ref(key: VerifyKey) -> str:
    """``<kid>#<the first 32 hex digits of the SHA-256 of the raw public key>``: the key itself, not
    only its name, so a kid given to a new key does not carry the old key's votes."""
    raw = key.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return f"{key.kid}#{hashlib.sha256(raw).hexdigest()[:32]}"


def approver_keyring(cfg: ApprovalsConfig) -> Keyring:
    keys = [VerifyKey(k.kid, a.id, load_public_key(k)) for a in cfg.approvers for k in a.keys]
    return Keyring(keys, {a.id: frozenset(a.groups) for a in cfg.approvers})


def load_public_key(entry: ApproverKey) -> Ed25519PublicKey:
    """The entry's key, read as its validation read it (``approver_public_key``)."""
    return approver_public_key(entry.public_key, entry.public_key_pem)


def raw_public_b64(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def key_thumbprint(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    key: Ed25519PrivateKey


class GrantKeys:
    """The gateway's grant keys: ``signer`` signs, ``keyring`` verifies with any."""

    def __init__(self, keys: list[SigningKey], owner: str) -> None:
        if not keys:
            raise ValueError("at least one grant key is needed")
        self.signer = keys[0]
        self.keyring = Keyring([VerifyKey(k.kid, owner, k.key.public_key()) for k in keys])


def gateway_grant_keys(config: Any) -> GrantKeys:
    """The grant keys of a gateway ``Config`` (``approvals.grant_keys``, see ``load_grant_keys``)."""
    return load_grant_keys(approvals_config(config), config.data_path, config.gateway_id,
                           shared_store=config.store.kind == "postgres")


def load_grant_keys(cfg: ApprovalsConfig, data_dir: Path, gateway_id: str, *, shared_store: bool = False) -> GrantKeys:
    """Load the grant key files; generate the first one (mode 0600) if it does not exist.

    With a ``shared_store`` (PostgreSQL: replicas) nothing is generated: a grant one replica signs
    may be presented to any, so all must sign with one key the operator gives each of them, and a
    key made here would be this replica's alone (its grants refused by the others). ValueError."""
    paths = [in_data_dir(data_dir, f) for f in cfg.grant_keys]
    if _first_to_make(paths, shared_store):
        write_private_key(paths[0], Ed25519PrivateKey.generate())
    keys = []
    for path in paths:
        key = _grant_key(path)
        keys.append(SigningKey(f"grant-{key_thumbprint(key.public_key())}", key))
    return GrantKeys(keys, owner=gateway_id)


def check_grant_keys(config: Any) -> bool:
    """Read every grant key a start of ``config`` would read, and make none (``toolgate config check``):
    True when a start would make the first one. ValueError as ``load_grant_keys``."""
    paths = [in_data_dir(config.data_path, f) for f in approvals_config(config).grant_keys]
    made = _first_to_make(paths, config.store.kind == "postgres")
    for path in paths[1 if made else 0:]:
        _grant_key(path)
    return made


def _first_to_make(paths: list[Path], shared_store: bool) -> bool:
    """Whether the first grant key is missing and is to be made here; ValueError when it is missing
    and may not be (``load_grant_keys``)."""
    if paths[0].exists():
        return False
    if shared_store:
        raise ValueError(
            f"grant key {paths[0]} does not exist. With store.kind: postgres the replicas must all sign grants "
            "with one key, so none is made here: create it once with 'toolgate keys grant --out FILE' and list "
            "that file first in approvals.grant_keys on every replica")
    return True


def _grant_key(path: Path) -> Ed25519PrivateKey:
    """One of ``approvals.grant_keys``; ValueError naming the setting and the file when it cannot be
    read or is no unencrypted Ed25519 private key in PEM."""
    try:
        pem = _read_grant_key(path)
    except OSError as exc:
        raise ValueError(f"approvals.grant_keys: {path}: {exc.strerror or exc}") from None
    try:
        return load_private_key(pem)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"approvals.grant_keys: {path} is not an unencrypted Ed25519 private key in PEM "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); make one with "
                         "'toolgate keys grant --out FILE'") from None


def _read_grant_key(path: Path) -> bytes:
    """The key file's bytes (``read_key_file``): whoever can read a grant key can sign grants (run
    any call as approved), whoever can write it can put their own in its place. So others may do
    neither, and its group may at most read it (a key shared with the gateway's group, as a
    mounted secret can be); ValueError otherwise."""
    try:
        return read_key_file(path, group_may_read=True)
    except KeyFileExposed as exc:
        raise ValueError(f"grant key {exc}, and whoever can read it can sign grants; {exc.remedy}") from None


def load_private_key(pem: bytes, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=passphrase)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def private_pem(key: Ed25519PrivateKey, passphrase: bytes | None = None) -> bytes:
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def write_private_key(
    path: Path, key: Ed25519PrivateKey, passphrase: bytes | None = None, labels: dict[str, str] | None = None
) -> None:
    """Create ``path`` with mode 0600 (refusing to overwrite); ``labels`` become
    ``toolgate-NAME: value`` lines before the PEM block (the CLI reads kid and approver there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = "".join(f"toolgate-{k}: {v}\n" for k, v in (labels or {}).items()).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(head + private_pem(key, passphrase))


def key_labels(pem: bytes) -> dict[str, str]:
    """The ``toolgate-NAME: value`` lines before a PEM block (see ``write_private_key``)."""
    labels = {}
    for line in pem.decode("utf-8", "replace").splitlines():
        if line.startswith("-----BEGIN"):
            break
        name, sep, value = line.partition(":")
        if sep and name.startswith("toolgate-"):
            labels[name[len("toolgate-"):].strip()] = value.strip()
    return labels
