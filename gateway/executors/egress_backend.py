"""Where an HTTP tool may connect: the address check, made on the address actually dialled.

The allow-list (``http.check_egress``) judges the URL's host *name*. A name can resolve to
anything: a compromised or rebinding DNS answer can point ``api.example.com`` at
``127.0.0.1``, at the cloud metadata service (``169.254.169.254``) or at a service inside
the network, with the tool's injected credentials attached. So the HTTP executor dials
through ``CheckedBackend``: it resolves the name once, refuses the connection if *any*
address it got is not public, and connects to exactly the addresses it checked (no second
lookup between the check and the connect). TLS still verifies the certificate against the
name, since httpcore gives ``start_tls`` the origin's host, not the address.

- A host written as an IP literal is not resolved: the operator listed that address
  itself (``check_egress`` matches literals only against exact entries), so it is dialled
  whatever its range; that is how a tool reaches a service on loopback.
- A tool whose names are meant to resolve inside the network sets
  ``options.allow_private_network: true``.

MCP streamable-HTTP upstreams (``gateway.executors.mcp``) dial through the same backend; their
client is httpx2 over httpcore2, so the backend is told which httpcore it serves (``core``:
its exceptions and its own backend to dial with).

Non-public: everything ``ipaddress`` does not call global (loopback, private, link-local,
shared 100.64/10, reserved, unspecified, documentation ranges), multicast, IPv6 addresses
that carry an IPv4 address (mapped, NAT64 ``64:ff9b::/96``, 6to4) when the IPv4 address is
not public, and IPv6 ranges ``ipaddress`` calls global that may lead inside (IPv4-compatible
``::/96``, IPv4-translated ``::ffff:0:0:0/96``, local-use NAT64 ``64:ff9b:1::/48``, site-local
``fec0::/10``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import typing
from types import ModuleType
from typing import Awaitable, Callable

import httpcore
from httpcore import AsyncNetworkBackend, AsyncNetworkStream

from gateway.executors.base import exception_in

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""(host, port) -> the addresses to dial, in order."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NEVER_PUBLIC_V6 = tuple(ipaddress.ip_network(n) for n in (
    "::/96",  # IPv4-compatible (deprecated): ::7f00:1 is 127.0.0.1 on a stack that still routes it
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
    "64:ff9b:1::/48",  # local-use NAT64: translates to whatever the local network holds
    "fec0::/10",  # site-local (deprecated), still routed inside some networks
))


class NonPublicAddress(Exception):
    """A host name resolved to an address the tool may not reach."""


def non_public_in(exc: BaseException) -> NonPublicAddress | None:
    """The ``NonPublicAddress`` behind ``exc``: itself, a cause or context, or inside an
    exception group (a client library may wrap the backend's refusal in its own errors)."""
    return exception_in(exc, NonPublicAddress)


def is_public(address: str) -> bool:
    """True for a globally routable unicast address (see the module docstring)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in net for net in _NEVER_PUBLIC_V6):
            return False
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(str(embedded))
    return ip.is_global and not ip.is_multicast


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class CheckedBackend(AsyncNetworkBackend):
    """An httpcore network backend that resolves, checks and dials (module docstring)."""

    def __init__(self, *, allow_private: bool, resolver: Resolver = system_resolver,
                 inner: AsyncNetworkBackend | None = None, core: ModuleType = httpcore) -> None:
        """``core``: the httpcore module whose pool this backend serves (httpcore or httpcore2)."""
        self._allow_private = allow_private
        self._resolve = resolver
        self._core = core
        self._connect_errors = (core.ConnectError, core.ConnectTimeout)
        self._inner = inner or core.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        addresses = [host.strip("[]")] if is_ip_literal(host) else await self._addresses(host, port, timeout)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except self._connect_errors as exc:
                failure = exc
        raise failure or self._core.ConnectError(f"{host} has no address")

    async def _addresses(self, host: str, port: int, timeout: float | None) -> list[str]:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._resolve(host, port)
        except TimeoutError as exc:
            raise self._core.ConnectTimeout(f"resolving {host} took longer than {timeout}s") from exc
        except OSError as exc:
            raise self._core.ConnectError(f"cannot resolve {host}: {exc}") from exc
        if not addresses:
            raise self._core.ConnectError(f"{host} has no address")
        if not self._allow_private:
            for address in addresses:
                if not is_public(address):
                    raise NonPublicAddress(
                        f"host {host!r} resolves to the non-public address {address}; a tool meant to reach "
                        "its own network sets options.allow_private_network"
                    )
        return addresses

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        raise self._core.ConnectError("unix sockets are not an HTTP tool's egress")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
