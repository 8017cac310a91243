"""Opening a file that must be a regular file: a key file, the audit log's head.

Opened without waiting (``O_NONBLOCK``: a FIFO put in its place would hang the opener, or its
first read) and checked on the descriptor opened (``fstat``, so a file swapped in after a check
is not used unchecked): anything but a regular file (a FIFO, a device) is ``EINVAL``.
"""

from __future__ import annotations

import errno
import os
import stat


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` (``flags`` with ``O_NONBLOCK`` and ``O_CLOEXEC`` added) and
    its ``fstat``; ``OSError`` (``EINVAL`` when it is no regular file, the descriptor closed)."""
    fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st
