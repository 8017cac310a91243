"""Signed checkpoints of the audit chain (``audit.signing_key``).

The hash chain shows an edit, a gap or a cut to whoever holds a copy of the log; it cannot
show a log rewritten whole, every hash recomputed, by someone who could write the file. A
checkpoint closes that for everything before it: an ``audit_checkpoint`` record
(``gateway.audit.CHECKPOINT``) whose ``signature`` is Ed25519 over the record's own canonical
form without ``hash`` and ``signature`` — its ``seq``, its ``prev_hash`` (so the whole chain before it), its time, the
gateway and the key's ``kid``. Only the key's holder can make one, and a record changed
before it breaks the ``prev_hash`` it signed.

The gateway writes one every ``audit.checkpoint_seconds`` when records were written since the
last, before a rotation (so a rotated file ends signed) and when it stops. What a signature
cannot show is records removed after the last checkpoint with the head rewritten to match:
that is the unsigned tail, which ``toolgate audit verify`` reports, and ``--require-signed``
refuses (a rotated file, or a log the gateway closed, ends with a checkpoint). Nor can it show the
log cut back to an earlier checkpoint, or a rotated log's active file removed: what is left is
signed to its end. Each checkpoint's seq and hash also go to the operational log (stderr), a
copy of the anchor off the log's file; ``toolgate audit verify --expect-record SEQ:HASH`` checks
the logs still hold the one kept from there.

Keys: the private key file is read as the grant key is (``read_key_file``: others may not
read it, nobody but its owner write it), generated (mode 0600) when missing, with its public
half beside it as ``<file>.pub``. The verifier takes public keys given to it on the command
line, never any the log names: copy the ``.pub`` off the host to where the logs are checked.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gateway.approvals.keyring import key_thumbprint, load_private_key, write_private_key
from gateway.key_files import MAX_KEY_FILE_BYTES, KeyFileExposed, read_key_file
from gateway.regular_files import open_regular

UNSIGNED = ("hash", "signature")
"""The fields a checkpoint's signature does not cover: the hash covers the signature instead."""


def kid_of(key: Ed25519PublicKey) -> str:
    return f"audit-{key_thumbprint(key)}"


@dataclass(frozen=True, slots=True)
class CheckpointSigner:
    key: Ed25519PrivateKey

    @property
    def kid(self) -> str:
        return kid_of(self.key.public_key())

    def sign(self, body: bytes) -> str:
        """base64url (no padding) of the Ed25519 signature over ``body``."""
        return base64.urlsafe_b64encode(self.key.sign(body)).rstrip(b"=").decode()


def signed_part(record: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint's signature covers: the record without ``UNSIGNED``."""
    return {k: v for k, v in record.items() if k not in UNSIGNED}


def signature_problem(record: dict[str, Any], body: bytes, keys: dict[str, Ed25519PublicKey]) -> str:
    """Why the checkpoint ``record`` (``body``: the canonical form of its ``signed_part``) does
    not verify with any of ``keys`` (by kid), or "" when it does."""
    kid, signature = record.get("kid"), record.get("signature")
    if not isinstance(kid, str) or not isinstance(signature, str):
        return "a checkpoint without a kid and a signature (strings)"
    key = keys.get(kid)
    if key is None:
        return f"checkpoint signed by key {kid[:64]!r}, which is none of the public keys given"
    try:
        raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        key.verify(raw, body)
    except (InvalidSignature, binascii.Error, ValueError):
        return f"the checkpoint's signature does not verify with key {kid}: forged, or the records before it were changed"
    return ""


def load_signer(path: Path) -> CheckpointSigner:
    """The signing key at ``path``; generated (0600, with ``<path>.pub``) when missing.
    ValueError when it cannot be used (exposed, not Ed25519, unreadable)."""
    if not path.exists():
        _make_signing_key(path)
    return read_signer(path)


def _make_signing_key(path: Path) -> None:
    """Generate the signing key at ``path`` (0600) with its ``<path>.pub``, unless another process
    made it first. ValueError when it cannot be made."""
    key = Ed25519PrivateKey.generate()
    try:
        write_private_key(path, key)
    except FileExistsError:  # another process made it first: that one is read
        pass
    except OSError as exc:
        raise ValueError(f"audit signing key {path} cannot be made: {exc.strerror or exc}") from None
    else:  # only the process that made the key writes its .pub; one left from a key no longer there goes
        try:
            public_path(path).unlink(missing_ok=True)
            write_public_key(public_path(path), key.public_key())
        except OSError as exc:
            raise ValueError(f"audit signing key {path} was made, but its public half {public_path(path)} "
                             f"cannot be written: {exc.strerror or exc}") from None


def read_signer(path: Path) -> CheckpointSigner:
    """The signing key at ``path``, which must exist. ValueError when it cannot be used (exposed,
    not Ed25519, unreadable)."""
    try:
        key = load_private_key(read_key_file(path, group_may_read=True))
    except KeyFileExposed as exc:
        raise ValueError(f"audit signing key {exc}, and whoever can read it can sign checkpoints of a "
                         f"rewritten log; {exc.remedy}") from None
    except OSError as exc:
        raise ValueError(f"audit signing key {path}: {exc.strerror or exc}") from None
    except (TypeError, ValueError) as exc:  # not a PEM key, encrypted, or not Ed25519
        raise ValueError(f"audit signing key {path}: {exc} (give an unencrypted Ed25519 PEM key, "
                         "e.g. one 'toolgate keys audit' makes)") from None
    return CheckpointSigner(key)


def public_path(private: Path) -> Path:
    return private.with_name(private.name + ".pub")


def write_public_key(path: Path, key: Ed25519PublicKey) -> None:
    """Create ``path`` (mode 0644) with the PEM of ``key``; FileExistsError when it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def read_public_keys(paths: list[str]) -> dict[str, Ed25519PublicKey]:
    """kid -> key for each PEM public key file (``--public-key``); ValueError naming the file
    that is not one."""
    keys = {}
    for name in paths:
        try:
            fd, _ = open_regular(name, os.O_RDONLY)  # a FIFO would hang the read: refused
            with open(fd, "rb") as f:
                data = f.read(MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"{name}: {exc.strerror or exc}") from None
        if len(data) > MAX_KEY_FILE_BYTES:
            raise ValueError(f"{name}: larger than {MAX_KEY_FILE_BYTES // 1024} KiB, so no public key")
        try:
            key = serialization.load_pem_public_key(data)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: not a PEM public key (give the .pub file beside the audit signing key)") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{name}: not an Ed25519 public key")
        keys[kid_of(key)] = key
    return keys
