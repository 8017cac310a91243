"""The gateway's own TLS files (``tls.cert_file``, ``tls.key_file``, ``tls.client_ca_file``), read and
checked before the port is bound.

gRPC takes the files' bytes as they are and only finds out at bind time that a certificate is not
PEM, a key is not a key, or the key is not the certificate's: its core logs "Unable to create secure
server" and the bind fails, which read as a port in use. Here each of those is an error naming the
setting and the file (``TlsFileError``), at start and in ``toolgate config check``.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from gateway.key_files import KeyFileExposed, read_key_file
from gateway.regular_files import open_regular


class TlsFileError(ValueError):
    """A TLS file that cannot be read or used; the message names the setting and the file."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """What ``grpc.ssl_server_credentials`` takes: the key, the certificate chain, and the CA that
    client certificates must chain to (None: no client certificates asked for)."""

    key: bytes
    chain: bytes
    client_ca: bytes | None
    not_after: datetime.datetime
    """When the gateway's certificate (the chain's first) expires, UTC."""


def load_tls_files(config: Any) -> TlsFiles:
    """Read and check the files ``config.tls`` names; ``TlsFileError`` for the first that is unusable."""
    tls = config.tls
    key_path, cert_path = config.resolve(tls.key_file), config.resolve(tls.cert_file)
    key = _read("tls.key_file", key_path, _read_private)
    chain = _read("tls.cert_file", cert_path)
    certificates = _certificates("tls.cert_file", cert_path, chain)
    _key_matches("tls.key_file", key_path, key, certificates[0], cert_path)
    client_ca = None
    if tls.client_ca_file:
        ca_path = config.resolve(tls.client_ca_file)
        client_ca = _read("tls.client_ca_file", ca_path)
        _certificates("tls.client_ca_file", ca_path, client_ca)
    return TlsFiles(key, chain, client_ca, certificates[0].not_valid_after_utc)


def _read(setting: str, path: Path, read: Any = None) -> bytes:
    try:
        if read is not None:
            return read(path)
        fd, _ = open_regular(path, os.O_RDONLY)  # a FIFO put in its place is refused, not waited on
        with os.fdopen(fd, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TlsFileError(f"{setting} {path}: {exc.strerror or exc}") from None


def _read_private(path: Path) -> bytes:
    """The gateway's TLS private key (``read_key_file``): whoever can read it can pose as this gateway
    to every agent and approver, and collect their API keys; whoever can write it can put their own in
    its place. So others may do neither, and its group may at most read it."""
    try:
        return read_key_file(path, group_may_read=True)
    except KeyFileExposed as exc:
        raise TlsFileError(f"tls.key_file {exc}, and whoever can read it can pose as this gateway; {exc.remedy}") from None


def _certificates(setting: str, path: Path, pem: bytes) -> list[x509.Certificate]:
    try:
        found = x509.load_pem_x509_certificates(pem)
    except ValueError:
        found = []
    if not found:
        raise TlsFileError(f"{setting} {path}: no PEM certificate in it (a file that begins "
                           "'-----BEGIN CERTIFICATE-----')")
    return found


def _key_matches(setting: str, path: Path, pem: bytes, certificate: x509.Certificate, cert_path: Path) -> None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:  # encrypted: gRPC takes no passphrase
        raise TlsFileError(f"{setting} {path}: the key is encrypted; gRPC needs it unencrypted "
                           "(keep it private with chmod 600 instead)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsFileError(f"{setting} {path}: no PEM private key in it") from None
    mine = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    theirs = certificate.public_key().public_bytes(serialization.Encoding.DER,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
    if mine != theirs:
        raise TlsFileError(f"{setting} {path} is not the key of the certificate in tls.cert_file {cert_path} "
                           "(the first certificate there must be the gateway's own)")
