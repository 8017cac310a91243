"""Call an HTTP endpoint under an egress allow-list.

- The URL comes from the descriptor's template; each ``{name}`` placeholder is filled with
  the argument percent-encoded as one path/query component (``/``, ``?``, ``#``, ``@`` too).
  A value that would make a path segment ``.`` or ``..`` is refused (``tool_error``): such a
  segment is removed when the URL is normalised, so the request would go to another route.
- Egress: the effective allow-list is the descriptor's ``allowed_hosts`` ∩ the policy's
  ``constraints.hosts`` (when policy gave hosts). The host is checked **before** any connection;
  ``egress_denied`` otherwise. Entries are ``host``, ``host:port`` or ``*.domain`` (sub-domains
  only; a wildcard never matches an IP literal). Only ``https`` unless
  ``options.allow_plain_http`` (tests, loopback services).
- The address dialled is checked too (``egress_backend``): a host name that resolves to a
  loopback, private, link-local or other non-public address is ``egress_denied`` unless
  ``options.allow_private_network``; the connection goes to the very addresses checked.
- Redirects are never followed to another host or scheme (``egress_denied``); same-origin
  redirects are followed up to ``options.max_redirects`` (default 3), each re-checked.
- TLS verification is always on; proxies from the environment are ignored (``trust_env=False``).
- No cookie is kept: the client is shared by every call, tool and tenant, so a session cookie one
  tenant's credentials earned would otherwise go out with the next tenant's calls.
- The tool timeout bounds the whole request, redirects and body included (httpx's own timeouts
  bound each connect and each read, which an upstream sending a byte at a time never trips).
- The body is streamed and capped (``options.max_response_bytes``, default 1 MiB): beyond it
  (and a margin, so that the cut never splits one of the call's secrets:
  ``gateway.executors.capture``) reading stops and the result is marked truncated. A JSON body
  nested too deeply to parse is kept as text.
- Credentials go only into headers (``ResolvedCredentials.headers``); arguments never set headers.
- ``>= 400`` is a ``tool_error`` (retryable for 408, 429 and 5xx); connection failures are
  retryable ``tool_error``; timeouts are ``tool_timeout`` (error type ``timeout``).
"""

from __future__ import annotations

import asyncio
import json
import string
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Mapping
from urllib.parse import quote

import httpx

from gateway.arguments import canonical_json
from gateway.codes import Code
from gateway.executors.base import ExecRequest, ExecResult, number_text
from gateway.executors.capture import CappedOutput
from gateway.executors.egress_backend import CheckedBackend, NonPublicAddress, Resolver, is_ip_literal, system_resolver
from gateway.executors.options import HttpOptions

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})


class EgressDenied(Exception):
    """The destination is not on the effective allow-list."""


def render_url(template: str, args: Mapping[str, Any]) -> str:
    out: list[str] = []
    filled: list[tuple[int, int, str]] = []  # (start, end, placeholder) in the rendered URL
    for literal, field, spec, conv in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        if spec or conv or not field.isidentifier() or field not in args:
            raise ValueError(f"URL placeholder {{{field}}} has no scalar argument")
        value = args[field]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"URL placeholder {{{field}}} must be a string or number")
        start = sum(map(len, out))
        out.append(quote(value if isinstance(value, str) else number_text(value), safe=""))
        filled.append((start, start + len(out[-1]), field))
    url = "".join(out)
    _refuse_dot_segments(url, filled)
    return url


def _refuse_dot_segments(url: str, filled: list[tuple[int, int, str]]) -> None:
    """A path segment ``.`` or ``..`` made (even in part) by a placeholder would be removed from
    the path when the URL is normalised, moving the request to another route: refused."""
    path_end = min((i for i in (url.find("?"), url.find("#")) if i != -1), default=len(url))
    start = 0
    for segment in url[:path_end].split("/"):
        end = start + len(segment)
        if segment in (".", ".."):
            for lo, hi, field in filled:
                if lo < end and start < hi:
                    raise ValueError(f"URL placeholder {{{field}}} may not make the path segment {segment!r}")
        start = end + 1


def effective_hosts(allowed: list[str], constraint_hosts: Any) -> list[str]:
    """Descriptor allow-list narrowed by policy; an entry survives if policy lists it exactly."""
    hosts = [h.lower() for h in allowed]
    if constraint_hosts is None:
        return hosts
    narrowed = {str(h).lower() for h in ([constraint_hosts] if isinstance(constraint_hosts, str) else constraint_hosts)}
    return [h for h in hosts if h in narrowed or _host_only(h) in narrowed]


def narrowed_hosts(allowed: list[str], request: ExecRequest) -> list[str]:
    """``allowed`` narrowed by the policy's ``hosts`` constraint and by the credential's hosts:
    where this call, and the credentials it carries, may go."""
    hosts = effective_hosts(allowed, request.constraints.get("hosts"))
    creds = request.credentials
    if creds is not None and creds.hosts is not None:
        hosts = effective_hosts(hosts, creds.hosts)
    return hosts


def check_egress(url: httpx.URL, hosts: list[str], *, allow_http: bool) -> None:
    if url.scheme not in ("https", "http") or (url.scheme == "http" and not allow_http):
        raise EgressDenied(f"scheme {url.scheme!r} not allowed")
    if url.userinfo:
        raise EgressDenied("credentials in the URL are not allowed")
    host = (url.host or "").lower().rstrip(".")
    port = url.port or (443 if url.scheme == "https" else 80)
    if not host or not any(_matches(entry, host, port) for entry in hosts):
        raise EgressDenied(f"host {host!r} is not allowed")


def _matches(entry: str, host: str, port: int) -> bool:
    name, _, want_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
    if want_port and int(want_port) != port:
        return False
    if name.startswith("*."):
        return host.endswith(name[1:]) and host != name[2:] and not is_ip_literal(host)
    return host == name


def _has_port(entry: str) -> bool:
    head, sep, tail = entry.rpartition(":")
    return bool(sep) and tail.isdigit() and not head.endswith(":")


def _host_only(entry: str) -> str:
    return entry.rpartition(":")[0] if _has_port(entry) else entry


class HttpExecutor:
    enforces_timeout = True
    """Stops at ``request.timeout`` itself (and cleans up)."""

    @staticmethod
    def confines_hosts(tool: Any) -> bool:
        """Every request goes to a host of the effective allow-list, checked where it connects."""
        return True

    def __init__(self, *, resolver: Resolver = system_resolver) -> None:
        # two pools: names resolving inside the network are refused by one, allowed by the other
        self._public = _client(CheckedBackend(allow_private=False, resolver=resolver))
        self._private = _client(CheckedBackend(allow_private=True, resolver=resolver))

    async def close(self) -> None:
        await self._public.aclose()
        await self._private.aclose()

    async def execute(self, request: ExecRequest) -> ExecResult:
        ex = request.tool.executor
        opts = ex.options
        if not isinstance(opts, HttpOptions):  # the config types them per kind: a bug, not a config error
            raise TypeError(f"tool {request.tool.name}: executor.options are not the http executor's")
        try:
            url = httpx.URL(render_url(ex.url, request.args))
        except (ValueError, httpx.InvalidURL) as exc:
            return ExecResult.failure(Code.TOOL_ERROR.value, str(exc))
        hosts = narrowed_hosts(ex.allowed_hosts, request)
        creds = request.credentials
        body = request.args.get(ex.body_arg) if ex.body_arg else None
        client = self._private if opts.allow_private_network else self._public
        call = _Call(client, ex.method.upper(), hosts, opts.allow_plain_http,
                     dict(creds.headers) if creds is not None else {}, request.timeout, opts,
                     creds.secret_values if creds is not None else frozenset())
        unsendable = sorted(name for name, value in call.headers.items() if not value.isascii())
        if unsendable:  # httpx would raise UnicodeEncodeError: an internal_error, with no name for it
            return ExecResult.failure(
                Code.TOOL_ERROR.value, f"header {unsendable[0]!r} holds characters an HTTP header cannot carry "
                "(ASCII only); check the credential or options.headers that sets it")
        try:
            async with asyncio.timeout(request.timeout):
                return await call.run(url, body)
        except (EgressDenied, NonPublicAddress) as exc:
            return ExecResult.failure(Code.EGRESS_DENIED.value, str(exc))
        except (httpx.TimeoutException, TimeoutError):
            return ExecResult.failure("timeout", f"no response within {request.timeout:g}s", retryable=True)
        except httpx.HTTPError as exc:
            return ExecResult.failure(Code.TOOL_ERROR.value, f"{type(exc).__name__}: {exc}", retryable=True)


def _client(backend: CheckedBackend) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(verify=True, trust_env=False)
    # httpx (pinned) builds its httpcore pool without a way to pass a network backend; the
    # pool's own attribute is set instead, and tests/executors/test_http_egress.py fails if
    # a name resolving to loopback ever gets through.
    transport._pool._network_backend = backend  # type: ignore[attr-defined]
    no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))  # neither stored nor sent
    return httpx.AsyncClient(follow_redirects=False, verify=True, trust_env=False, transport=transport,
                             cookies=no_cookies)


class _Call:
    def __init__(self, client: httpx.AsyncClient, method: str, hosts: list[str], allow_http: bool,
                 headers: dict[str, str], timeout: float, opts: HttpOptions, secrets: frozenset[str]) -> None:
        self.client, self.method, self.hosts, self.allow_http = client, method, hosts, allow_http
        self.secrets = secrets
        fixed = dict(opts.headers)
        merged = {k: v for k, v in {**fixed, **headers}.items() if k.lower() != "accept-encoding"}
        self.headers = {**merged, "accept-encoding": "identity"}  # last, whatever the descriptor sets: never a compressed body
        self.timeout = httpx.Timeout(timeout)
        self.cap = opts.max_response_bytes
        self.max_redirects = opts.max_redirects

    async def run(self, url: httpx.URL, body: Any) -> ExecResult:
        origin = (url.scheme, url.host, url.port)
        for _ in range(self.max_redirects + 1):
            check_egress(url, self.hosts, allow_http=self.allow_http)
            req = self.client.build_request(self.method, url, headers=self.headers, timeout=self.timeout,
                                            content=None if body is None else canonical_json(body))  # numbers as hashed and approved
            if body is not None:
                req.headers["content-type"] = "application/json"
            resp = await self.client.send(req, stream=True)
            try:
                if resp.status_code not in REDIRECT_STATUS:
                    return await self._result(resp)
                url = _redirect_target(url, resp)
            finally:
                await resp.aclose()
            if (url.scheme, url.host, url.port) != origin:
                raise EgressDenied(f"redirect to another origin ({url.host}) refused")
            if resp.status_code == 303:
                self.method, body = "GET", None
        return ExecResult.failure(Code.TOOL_ERROR.value, "too many redirects")

    async def _result(self, resp: httpx.Response) -> ExecResult:
        refused = refused_encoding(resp.headers, "the upstream")
        if refused is not None:
            return ExecResult.failure(Code.TOOL_ERROR.value, refused, meta={"http_status": resp.status_code})
        text, truncated = await _read_capped(resp, CappedOutput(self.cap, self.secrets))
        data = {"status": resp.status_code, "content_type": resp.headers.get("content-type", ""),
                "body": _decode(text, resp.headers.get("content-type", ""), truncated)}
        meta = {"truncated": truncated, "http_status": resp.status_code}
        if resp.status_code >= 400:
            return ExecResult.failure(Code.TOOL_ERROR.value, f"HTTP {resp.status_code}",
                                      retryable=resp.status_code in RETRYABLE_STATUS, data=data, meta=meta)
        return ExecResult(ok=True, data=data, meta=meta)


def refused_encoding(headers: Mapping[str, str], sender: str) -> str | None:
    """Why a response from ``sender`` is refused for its ``Content-Encoding``, or None for a body
    as sent (none, or ``identity``). The gateway asks for ``identity`` and never inflates a body:
    a small compressed one can hold gigabytes, and its size is not known before. Shared by the
    HTTP executor and the MCP executor's HTTP transport."""
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    return (f"{sender} answered with content-encoding {encoding[:40]!r}; the gateway asks for identity and does "
            "not decode compressed bodies")


def _redirect_target(url: httpx.URL, resp: httpx.Response) -> httpx.URL:
    location = resp.headers.get("location")
    if not location:
        raise EgressDenied("redirect without a location")
    try:
        return url.join(location)
    except httpx.InvalidURL as exc:
        raise EgressDenied("redirect to an invalid URL") from exc


async def _read_capped(resp: httpx.Response, body: CappedOutput) -> tuple[str, bool]:
    async for chunk in resp.aiter_raw():  # as sent: nothing decoded (see _result)
        body.feed(chunk)
        if body.full:
            break
    return body.text(), body.truncated


def _decode(text: str, content_type: str, truncated: bool) -> Any:
    if "json" in content_type and not truncated:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse: the text
            return text
    return text
