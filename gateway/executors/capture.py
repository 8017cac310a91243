"""Capture a tool's output up to a cap without cutting a secret in half.

The scrubber (``gateway.scrub``) recognises whole secrets only, so output is never cut blindly
at the cap: ``CappedOutput`` keeps the first ``cap`` bytes *and* a margin past them
(``Scrubber.margin``: the longest form of this call's secrets, at least a few KiB), and
when the output was longer than the cap it is cut with ``Scrubber.cut`` — at the cap, or
earlier where a secret crosses it. The rest of the stream is read and dropped.
"""

from __future__ import annotations

import asyncio
import codecs
import os
from contextlib import asynccontextmanager
from typing import IO, AsyncIterator, Iterable

from gateway.scrub import Scrubber

PIPE_GRACE_SECONDS = 2.0
"""How long to wait for a pipe's end after its process is gone (an escaped child may hold it)."""


class CappedOutput:
    """The first ``cap`` bytes of a stream, cut so that no secret in ``secrets`` is split."""

    def __init__(self, cap: int, secrets: Iterable[str] = ()) -> None:
        self.cap = cap
        self._scrubber = Scrubber(secrets)
        self._keep = cap + self._scrubber.margin()
        self._buf = bytearray()
        self.truncated = False
        """More than ``cap`` bytes arrived."""

    @property
    def full(self) -> bool:
        """Everything that can be kept has arrived; what follows is dropped."""
        return len(self._buf) >= self._keep

    def feed(self, chunk: bytes) -> None:
        room = self._keep - len(self._buf)
        if room > 0:
            self._buf += chunk[:room]
        self.truncated = self.truncated or len(self._buf) > self.cap or len(chunk) > room

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        """Read ``stream`` to its end, keeping what fits."""
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self.feed(chunk)

    def text(self) -> str:
        if not self.truncated:
            return self._buf.decode("utf-8", errors="replace")
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        head = decoder.decode(bytes(self._buf[: self.cap]))  # holds back a character the cap splits
        whole = head + decoder.decode(bytes(self._buf[self.cap:]), final=True)
        return self._scrubber.cut(whole, len(head))


async def finish_readers(readers: list[asyncio.Future[None]]) -> None:
    """Let the readers reach EOF; a process that escaped its group may hold a pipe open: stop waiting."""
    _, pending = await asyncio.wait(readers, timeout=PIPE_GRACE_SECONDS)
    for task in pending:
        task.cancel()


@asynccontextmanager
async def captured_pipe(output: CappedOutput) -> AsyncIterator[IO[bytes]]:
    """A pipe whose write end is given to a child as its stderr; what it writes lands in
    ``output`` (bounded) instead of the gateway's own file descriptors. On exit the write
    end is closed and the reader drained (within ``PIPE_GRACE_SECONDS``)."""
    read_fd, write_fd = os.pipe()  # not inheritable: a child gets the write end only as the fd it is given
    writer, pipe = os.fdopen(write_fd, "wb", buffering=0), os.fdopen(read_fd, "rb", buffering=0)
    reader = asyncio.StreamReader()
    try:
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except BaseException:
        writer.close()
        pipe.close()
        raise
    task = asyncio.ensure_future(output.drain(reader))
    try:
        yield writer
    finally:
        writer.close()
        await finish_readers([task])
        transport.close()
