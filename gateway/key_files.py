"""Reading private key files: grant keys, approvers' keys, the gateway's TLS key.

Whoever can write a key file can put their own key in its place; whoever can read an unencrypted
one can sign (or serve TLS) as its owner. ``read_key_file`` checks the file it reads, not a path
checked before (``fstat`` of the open file, so a file swapped in after a check is not read
unchecked): a regular file (a FIFO would hang the reader, a device is no key) of at most 1 MiB, owned
by this user or root (its owner may always change it, whatever its mode: PostgreSQL holds its
``ssl_key_file`` to the same rule), that its group and others may not write, nor read unless
allowed. POSIX only: elsewhere files have no such mode or owner, and none is refused.
"""

from __future__ import annotations

import errno
import os

from gateway.regular_files import open_regular

MAX_KEY_FILE_BYTES = 1024 * 1024
"""More than any PEM key (with its chain and labels) takes: a path to some other, larger file is refused
before it is read whole."""


class KeyFileExposed(ValueError):
    """Raised by ``read_key_file``: the key file lets ``who`` ("others", "its group", or "its owner"
    when that is another user, ``owner`` its uid) ``access`` it ("write": put their key in its place;
    "read": sign with it). ``mode`` is its permission bits."""

    def __init__(self, path: str | os.PathLike[str], mode: int, who: str, access: str, owner: int | None = None) -> None:
        lets = f"it is owned by uid {owner}, who may" if owner is not None else f"mode {mode:o} lets {who}"
        super().__init__(f"{os.fspath(path)}: {lets} {access} it")
        self.path, self.mode, self.who, self.access, self.owner = path, mode, who, access, owner

    @property
    def remedy(self) -> str:
        """What to do about it, without being root: a key another user owns (and may rewrite) is
        copied to one's own file; one whose mode lets others in is made private."""
        if self.owner is not None:
            return f"make a copy of your own (install -m 600 {os.fspath(self.path)} NEW-FILE) and use that"
        return f"run chmod 600 {os.fspath(self.path)}"


def read_key_file(path: str | os.PathLike[str], *, group_may_read: bool = False,
                  encrypted_may_be_read: bool = False) -> bytes:
    """The bytes of a private key file (see the module docstring). ``KeyFileExposed`` when another
    user owns it, or its group or others may write it (all checked before reading), or read it:
    unless ``group_may_read`` (its group may), or ``encrypted_may_be_read`` and it is encrypted
    (``pem_encrypted``: a copy is no use without the passphrase). ``OSError`` when it cannot be
    read, or is no regular file (``EINVAL``)."""
    fd, st = open_regular(path, os.O_RDONLY)
    with open(fd, "rb") as f:
        posix = os.name == "posix"
        mode = st.st_mode & 0o777 if posix else 0
        if posix and st.st_uid not in (os.geteuid(), 0):
            raise KeyFileExposed(path, mode, "its owner", "write", owner=st.st_uid)
        if mode & 0o022:
            raise KeyFileExposed(path, mode, "others" if mode & 0o002 else "its group", "write")
        pem = f.read(MAX_KEY_FILE_BYTES + 1)
        if len(pem) > MAX_KEY_FILE_BYTES:
            raise OSError(errno.EFBIG, f"larger than {MAX_KEY_FILE_BYTES // 1024} KiB, so no key file", os.fspath(path))
        readers = mode & (0o004 if group_may_read else 0o044)
        if readers and not (encrypted_may_be_read and pem_encrypted(pem)):
            raise KeyFileExposed(path, mode, "others" if readers & 0o004 else "its group", "read")
        return pem


def pem_encrypted(pem: bytes) -> bool:
    """Whether the PEM header says the key is encrypted (PKCS#8, or traditional OpenSSL)."""
    return b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem or b"Proc-Type: 4,ENCRYPTED" in pem
