"""The transports the MCP executor reaches an upstream through, bounded by the call's budget.

One ``OutputBudget`` per call (each call is its own session) counts every byte the call
receives from its upstream: a stdio server's stdout, an HTTP server's response bodies as sent.
Past it the budget records why and raises ``OutputRefused``; the executor fails the call on the
record, whatever the SDK made of the exception on its way (raised, wrapped in a group, or
swallowed into an error reply). What is held stays near the budget: stdout is read in chunks
and no line grows past the budget, a body is never read past it, and a compressed body is
refused (``gateway.executors.http.refused_encoding``, as by the HTTP executor).

``stdio_transport`` replaces the SDK's ``stdio_client``, whose reader keeps a line however long
it grows and builds it by repeated concatenation, holding the event loop while it copies.
Like it: the server runs in a new session (its own process group) with the environment and
working folder it is given and stderr to the given file; messages are one JSON-RPC object per
line, a line that does not parse reaches the session as an exception; writes are one message
per line. Lines are split as chunks arrive, each byte looked at once. At the session's end
stdin is closed and the server gets ``EXIT_GRACE_SECONDS`` to exit, then its whole process
group is killed (SIGKILL), with whatever the server left running in it. A server past its
budget is killed at once: nothing more is read from it. The server's exit is waited for as
the event loop reports it (``gateway.executors.subprocess.ExitProtocol``), not polled. A
server that cannot be started at all (``command`` missing or not executable, ``cwd`` missing)
raises ``SpawnFailed``, which the executor reports as not retryable (retryable when the gateway
was only short of processes, open files or memory: ``SpawnFailed.transient``).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager, suppress
from typing import IO, Any, AsyncIterator, NoReturn

import anyio
import httpx2
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from gateway.executors.http import refused_encoding
from gateway.executors.subprocess import ExitProtocol, kill_group, start_process

CHUNK_BYTES = 64 * 1024
"""How much of a stdio server's stdout is read at a time (and buffered by the pipe reader)."""
FLUSH_SECONDS = 0.5
"""At the session's end: how long the messages already accepted get to reach stdin."""
EXIT_GRACE_SECONDS = 2.0
"""How long a stdio server gets to exit once its stdin is closed, before its group is killed."""
REAP_SECONDS = 2.0
"""How long to wait for a killed server's exit to be seen."""


class OutputRefused(Exception):
    """The upstream sent what one call may not receive; ``OutputBudget.refusal`` says what."""


class OutputBudget:
    """What one call to upstream ``upstream`` may receive: ``cap`` bytes."""

    def __init__(self, upstream: str, cap: int) -> None:
        self.upstream, self.cap = upstream, cap
        self.received = 0
        self.refusal: str | None = None
        """Why the upstream's output was refused (the call's error message), or None."""

    def take(self, size: int) -> None:
        """Count ``size`` bytes received; past the cap the call's output is refused."""
        self.received += size
        if self.received > self.cap:
            self.refuse(
                f"MCP upstream {self.upstream} sent more than {self.cap} bytes in one call (its tool listing "
                "included); refused, since a JSON-RPC message cannot be cut. If its answers are that large, "
                f"raise mcp_upstreams.{self.upstream}.max_output_bytes")

    def refuse(self, why: str) -> NoReturn:
        if self.refusal is None:
            self.refusal = why
        raise OutputRefused(self.refusal)


# -- stdio -------------------------------------------------------------------------------


@asynccontextmanager
async def stdio_transport(command: str, args: list[str], *, env: dict[str, str], cwd: str | None,
                          stderr: IO[bytes], budget: OutputBudget) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server; yield (read stream, write stream) for ``mcp.Client`` (module docstring)."""
    loop = asyncio.get_running_loop()
    transport, protocol = await start_process(
        [command, *args], CHUNK_BYTES, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=stderr, cwd=cwd, env=env, start_new_session=True)
    proc = asyncio.subprocess.Process(transport, protocol, loop)
    # no await until the try: a cancellation in between would leave the server running
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    reader = asyncio.ensure_future(_read(proc, to_session, budget))
    writer = asyncio.ensure_future(_write(proc, from_session, to_session))
    try:
        yield read_stream, write_stream
    finally:
        with anyio.CancelScope(shield=True):
            try:
                read_stream.close()  # the reader, blocked on a session that is gone, drains stdout instead
                write_stream.close()  # the writer sends what it was given, then ends
                await asyncio.wait([writer], timeout=FLUSH_SECONDS)
                proc.stdin.close()  # type: ignore[union-attr]
                await _exited(protocol, EXIT_GRACE_SECONDS)
            finally:  # also when a native cancellation cut the wait short: nothing keeps running
                kill_group(proc.pid)
                reader.cancel()
                writer.cancel()
                transport.close()
            await _exited(protocol, REAP_SECONDS)


async def _read(proc: asyncio.subprocess.Process, to_session: MemoryObjectSendStream[SessionMessage | Exception],
                budget: OutputBudget) -> None:
    """stdout to the session, message by message, within the budget."""
    stdout = proc.stdout
    assert stdout is not None
    line = bytearray()
    try:
        async with to_session:  # closed at the end: the session sees the connection end
            while chunk := await stdout.read(CHUNK_BYTES):
                budget.take(len(chunk))
                view, start = memoryview(chunk), 0
                while (end := chunk.find(b"\n", start)) != -1:
                    line += view[start:end]
                    await to_session.send(_message(line))
                    line.clear()
                    start = end + 1
                line += view[start:]
    except OutputRefused:
        kill_group(proc.pid)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        # the session is over: keep the pipe flowing, so a server writing can see stdin close and exit
        with suppress(OSError):
            while await stdout.read(CHUNK_BYTES):
                pass


def _message(line: bytearray) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # not JSON-RPC: handed to the session as the SDK does
        return exc


async def _write(proc: asyncio.subprocess.Process, from_session: MemoryObjectReceiveStream[SessionMessage],
                 to_session: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    stdin = proc.stdin
    assert stdin is not None
    try:
        async with from_session:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(data.encode() + b"\n")
                await stdin.drain()
    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        to_session.close()  # the server stopped reading: the session sees the end, not a reply never coming


async def _exited(protocol: ExitProtocol, seconds: float) -> bool:
    """Whether the server exited within ``seconds``. Not ``proc.wait()``: that also waits for the
    pipes to close, which a process the server left behind delays."""
    with suppress(asyncio.TimeoutError):
        await asyncio.wait_for(protocol.exited.wait(), seconds)
    return protocol.exited.is_set()


# -- streamable HTTP ---------------------------------------------------------------------


class CappedHTTPTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport, its response bodies counted against the call's budget as they stream."""

    def __init__(self, budget: OutputBudget, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = budget

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._budget.refusal is not None:  # the SDK may reconnect after it swallowed the refusal: no more
            self._budget.refuse(self._budget.refusal)
        response = await super().handle_async_request(request)
        refused = refused_encoding(response.headers, f"MCP upstream {self._budget.upstream}")
        if refused is not None:
            await response.aclose()
            self._budget.refuse(refused)
        response.stream = _CountedStream(response.stream, self._budget)  # type: ignore[arg-type]
        return response


class _CountedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, budget: OutputBudget) -> None:
        self._inner, self._budget = inner, budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._budget.take(len(chunk))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
