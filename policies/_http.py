"""A minimal keep-alive HTTP/1.1 client for exactly one use: POSTing JSON to OPA's Data API.

Why not httpx: against the same local OPA and input, a decision through httpx cost the
gateway ~800 µs of CPU; through this client the whole decision costs ~135 µs, of which the
exchange here is ~75 µs (the rest is JSON, the timeout and the strict decision parse). See
``policies.opa`` for the table.

What it speaks, and nothing more:

- ``http://host[:port][/prefix]`` over TCP, or ``unix:///absolute/path.sock`` over a Unix
  socket (OPA's ``--addr unix://...``);
- requests: ``POST <target>`` with a ``Content-Length`` body;
- responses: an ``HTTP/1.x`` status line, headers, and a body framed by ``Content-Length``
  or ``Transfer-Encoding: chunked`` (nothing else: an answer framed any other way, an
  interim 1xx, a malformed status line or header, a body above ``max_body`` (16 MiB by
  default) ⇒ ``TransportError``). No proxies (``HTTP_PROXY`` is ignored), no redirects,
  no compression.

A pool of connections: each request takes an idle one (last used first) or dials a new
one, at most ``max_connections`` at once (others wait, within the caller's timeout). A
connection goes back to the pool only after a complete, well-framed ``HTTP/1.1`` answer
with nothing left over and no ``Connection: close``; on any error, timeout or
cancellation it is aborted. Bytes that arrive on an idle connection, or its close, mark it
unusable, so it is never handed out again.

One retry, and only one: when a *kept-alive* connection (one that already carried an
answer) fails before any byte of the answer arrived — the server closed or reset it while
it sat idle, a race no client can avoid — the request is sent again on a freshly dialed
connection. That is safe because a Data API POST is a pure query: evaluating it twice
changes nothing (OPA's decision log, if on, may show the first attempt as well). A fresh
connection is never retried, and neither is a failure after the first response byte.

The pool belongs to the event loop it was first used on; on another loop it starts over
(the old loop's connections are never reused; the garbage collector closes their sockets).

Errors::

    Exception
    └── TransportError        no complete, well-framed answer (⇒ the caller fails closed)
        └── StaleConnection   closed before the first response byte (the retry's trigger)
"""

from __future__ import annotations

import asyncio
import re
from typing import Final
from urllib.parse import urlsplit

_MAX_HEAD: Final = 64 * 1024
"""Status line and headers; a longer head is an error."""
_MAX_CHUNK_LINE: Final = 1024
_MAX_HEADS: Final = 32
"""Request heads kept, one per target."""
_MAX_TRAILERS: Final = 64
_STATUS: Final = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [^\r\n]*)?")
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,15}")
_PREFIX: Final = re.compile(r"(/[A-Za-z0-9._~%!$&'()*+,;=:@-]+)*")
_AUTHORITY: Final = re.compile(r"[A-Za-z0-9._~%:\[\]-]+")


def opa_url_problem(url: str) -> str:
    """Why the opa engine cannot use ``url`` ("" when it can): this client's ``http://`` and
    ``unix:///`` forms (``Endpoint``), or ``https://`` with a host; never credentials, a query or a
    fragment. The URL itself is not quoted: it may hold a secret."""
    try:
        refuse_url_extras(url)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "unix"):
            return f"scheme {parts.scheme or '(none)'!r} is not one of http://, https:// and unix://"
        try:
            parts.port  # noqa: B018 - urllib's own message would quote the port's text
        except ValueError:
            return "its port is not a number from 0 to 65535"
        if parts.scheme != "https":
            Endpoint(url)
        elif not parts.hostname or parts.port == 0:
            return "an https:// URL needs a host (and a port, if given, above 0)"
    except ValueError as exc:
        return str(exc)
    return ""


class TransportError(Exception):
    """The request got no complete, well-framed answer: connect, reset, EOF, bad framing."""


class StaleConnection(TransportError):
    """The connection was closed or reset before the first byte of the answer."""


class Endpoint:
    """Where OPA listens, parsed once from the configured URL."""

    def __init__(self, url: str) -> None:
        """Raises ``ValueError`` for anything but ``http://host[:port][/prefix]`` or
        ``unix:///absolute/path``; credentials, query strings and fragments are refused."""
        refuse_url_extras(url)
        parts = urlsplit(url)
        self.unix_path: str | None = None
        self.host, self.port = "", 0
        if parts.scheme == "unix":
            if parts.netloc or not parts.path.startswith("/"):
                raise ValueError(f"a Unix socket URL is unix:///absolute/path, not {url!r}")
            self.unix_path, self.authority, self.prefix = parts.path, "localhost", ""
        elif parts.scheme == "http":
            if not parts.hostname:
                raise ValueError(f"OPA URL has no host: {url!r}")
            self.host, self.port = parts.hostname, parts.port or 80  # .port raises ValueError if bad
            self.authority, self.prefix = parts.netloc, parts.path.rstrip("/")
            if not _AUTHORITY.fullmatch(self.authority) or not _PREFIX.fullmatch(self.prefix):
                raise ValueError(f"OPA URL path has characters that need escaping: {url!r}")
        else:
            raise ValueError(f"this client speaks http:// and unix:// only, not {url!r}")


def refuse_url_extras(url: str) -> None:
    """Raise ``ValueError`` when ``url`` carries credentials, a query or a fragment.

    The message does not repeat the URL: what it refuses may be a password, and the engine's
    URL otherwise shows in its version (every response's ``policy_version``) and in errors.
    """
    parts = urlsplit(url)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("OPA URL must not carry credentials, a query or a fragment (the URL is not shown)")


class Http11Pool:
    """Keep-alive HTTP/1.1 connections to one endpoint; see the module docstring."""

    def __init__(self, endpoint: Endpoint, *, max_connections: int = 64, max_body: int = 16 * 1024 * 1024) -> None:
        """``max_connections`` requests at once (each holds one connection; so never more idle
        than that); an answer above ``max_body`` bytes is an error."""
        self._endpoint = endpoint
        self._max_connections, self._max_body = max_connections, max_body
        self._heads: dict[str, bytes] = {}  # target -> the request head up to the length
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def post(self, target: str, body: bytes) -> tuple[int, bytes]:
        """``POST prefix+target`` with a JSON ``body``; the status and the whole response body.

        Raises ``TransportError``. Not bounded in time by itself: the caller wraps it in
        ``asyncio.timeout`` (a cancelled request aborts its connection).
        """
        if self._closed:
            raise TransportError("the OPA client is closed")
        self._bind_loop()
        request = b"%s%d\r\n\r\n%s" % (self._heads.get(target) or self._head(target), len(body), body)
        async with self._slots:
            conn = self._checkout()
            if conn is not None:
                try:
                    return await self._exchange(conn, request)
                except StaleConnection:
                    pass  # the server dropped a kept-alive connection: a pure query, sent once more
            return await self._exchange(await self._dial(), request)

    async def aclose(self) -> None:
        """Close the idle connections; requests in flight finish, then their connections close.

        Connections of another event loop than the running one are left to it (or to the GC).
        """
        self._closed = True
        idle, self._idle = self._idle, []
        if self._loop is asyncio.get_running_loop():
            for conn in idle:
                conn.abort()

    def _head(self, target: str) -> bytes:
        """The request's head for ``target``, up to the Content-Length's value; the first
        ``_MAX_HEADS`` targets' heads are kept (an engine asks a handful of paths)."""
        head = (f"POST {self._endpoint.prefix}{target} HTTP/1.1\r\nHost: {self._endpoint.authority}\r\n"
                "User-Agent: toolgate\r\nContent-Type: application/json\r\nContent-Length: ").encode("ascii")
        if len(self._heads) < _MAX_HEADS:
            self._heads[target] = head
        return head

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # another loop's connections cannot be used or closed from here
            self._loop, self._idle = loop, []
            self._slots = asyncio.Semaphore(self._max_connections)

    def _checkout(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable:
                return conn
            conn.abort()
        return None

    async def _dial(self) -> _Connection:
        loop = asyncio.get_running_loop()
        endpoint = self._endpoint
        try:
            if endpoint.unix_path is not None:
                _, conn = await loop.create_unix_connection(_Connection, endpoint.unix_path)
            else:
                _, conn = await loop.create_connection(_Connection, endpoint.host, endpoint.port)
        except OSError as exc:
            raise TransportError(f"cannot connect: {type(exc).__name__}: {exc}") from exc
        return conn

    async def _exchange(self, conn: _Connection, request: bytes) -> tuple[int, bytes]:
        keep = False
        try:
            conn.send(request)
            status, body, keep = await conn.read_response(self._max_body)
            return status, body
        finally:
            if keep and not self._closed and conn.finish():
                self._idle.append(conn)
            else:
                conn.abort()


class _Connection(asyncio.Protocol):
    """One connection: the event loop fills ``_buffer``; one request at a time reads it."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._busy = False
        self._closed = False
        self._lost: Exception | None = None
        self._received = 0

    # -- event loop callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if not self._busy:  # nobody asked: the framing of this connection cannot be trusted
            self.abort()
            return
        self._buffer += data
        self._received += len(data)
        self._wake()

    def eof_received(self) -> bool:
        self._closed = True
        self._wake()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed, self._lost = True, exc
        self._wake()

    # -- the request's side

    @property
    def usable(self) -> bool:
        """Open, idle and with nothing unread."""
        return not self._closed and not self._busy and not self._buffer and self._transport is not None \
            and not self._transport.is_closing()

    def abort(self) -> None:
        """Drop the connection now (no graceful close: its state is unknown or unwanted)."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    def finish(self) -> bool:
        """Back to idle after a complete answer; False when it cannot be reused."""
        self._busy = False
        return self.usable

    def send(self, request: bytes) -> None:
        """Mark busy and write ``request`` (the write never blocks; the transport buffers it)."""
        assert self._transport is not None
        self._busy, self._received = True, 0
        self._transport.write(request)

    async def read_response(self, max_body: int) -> tuple[int, bytes, bool]:
        """Status, body and whether the connection may carry another request."""
        head = await self._read_until(b"\r\n\r\n", _MAX_HEAD)
        lines = head.split(b"\r\n")
        status_line = _STATUS.fullmatch(lines[0])
        if status_line is None:
            raise TransportError(f"not an HTTP/1.x status line: {bytes(lines[0][:80])!r}")
        http11, status = status_line[1] == b"1", int(status_line[2])
        if status < 200:
            raise TransportError(f"unexpected interim response {status}")
        lengths, codings, close = set(), [], not http11
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name):
                raise TransportError(f"malformed header line: {bytes(line[:80])!r}")
            name, value = name.lower(), value.strip(b" \t")
            if name == b"content-length":
                lengths.add(value)
            elif name == b"transfer-encoding":
                codings += [c.strip(b" \t").lower() for c in value.split(b",")]
            elif name == b"connection":
                close = close or b"close" in (t.strip(b" \t").lower() for t in value.split(b","))
        if codings and lengths:
            raise TransportError("both Content-Length and Transfer-Encoding")
        if status in (204, 304):
            body = b""
        elif codings:
            if codings != [b"chunked"]:
                raise TransportError(f"unsupported Transfer-Encoding {b', '.join(codings)!r}")
            body = await self._read_chunked(max_body)
        elif lengths:
            body = await self._read_exactly(_content_length(lengths, max_body))
        else:
            raise TransportError("the answer has neither Content-Length nor chunked framing")
        return status, body, not close and not self._buffer

    async def _read_chunked(self, max_body: int) -> bytes:
        chunks, total = [], 0
        while True:
            size_line = (await self._read_until(b"\r\n", _MAX_CHUNK_LINE)).split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(size_line):
                raise TransportError(f"malformed chunk size {size_line[:20]!r}")
            size = int(size_line, 16)
            if size == 0:
                break
            total += size
            if total > max_body:
                raise TransportError(f"the answer is larger than {max_body} bytes")
            chunks.append(await self._read_exactly(size))
            if await self._read_exactly(2) != b"\r\n":
                raise TransportError("a chunk is not followed by CRLF")
        for _ in range(_MAX_TRAILERS):
            if not await self._read_until(b"\r\n", _MAX_HEAD):
                return b"".join(chunks)
        raise TransportError("too many trailer lines")

    async def _read_until(self, separator: bytes, limit: int) -> bytes:
        start = 0
        while True:
            end = self._buffer.find(separator, start)
            if end >= 0:
                out = bytes(self._buffer[:end])
                del self._buffer[: end + len(separator)]
                return out
            if len(self._buffer) > limit:
                raise TransportError(f"no {separator!r} within {limit} bytes")
            start = max(0, len(self._buffer) - len(separator) + 1)
            await self._more()

    async def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            await self._more()
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    async def _more(self) -> None:
        """Wait for more bytes; raises once the connection has closed (the caller re-reads)."""
        if self._closed:
            why = f" ({type(self._lost).__name__}: {self._lost})" if self._lost else ""
            if self._received == 0:
                raise StaleConnection(f"the connection was closed before the answer began{why}")
            raise TransportError(f"the connection was closed in the middle of the answer{why}")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def _content_length(values: set[bytes], max_body: int) -> int:
    if len(values) != 1:
        raise TransportError("conflicting Content-Length headers")
    (value,) = values
    if not value.isdigit() or len(value) > 18:
        raise TransportError(f"malformed Content-Length {value[:20]!r}")
    length = int(value)
    if length > max_body:
        raise TransportError(f"the answer is larger than {max_body} bytes")
    return length
