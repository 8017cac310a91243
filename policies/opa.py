"""The opa engine: an OPA server's REST Data API (``POST /v1/data/<path>``).

Transport. For ``http://`` and ``unix:///path.sock`` URLs, a small keep-alive HTTP/1.1
client of our own (``policies._http``) that speaks exactly what the Data API needs; for
``https://`` (TLS to a remote OPA), httpx. Measured on one machine (2-core shared VM)
against the same local OPA, default bundle, the gateway's own input for a read tool, 3,000
sequential decisions, p50 per decision (medians of three runs; CPU is this process only):

=================================  ========  =============  =================
path                               p50       over embedded  client CPU / call
=================================  ========  =============  =================
embedded (``evaluate_sync``)       ~45 µs    —              ~50 µs
httpx over TCP (before)            ~1.03 ms  ~0.99 ms       ~800 µs
this engine, TCP                   ~0.32 ms  ~0.28 ms       ~135 µs
this engine, Unix socket           ~0.31 ms  ~0.27 ms       ~130 µs
floor: bare asyncio stream, TCP    ~0.27 ms  ~0.22 ms       ~85 µs
=================================  ========  =============  =================

The floor is a hand-built request on one asyncio stream with no timeout, pool or strict
decision parse; the ~50 µs between it and this engine are ``asyncio.timeout`` (~9 µs),
JSON in and out, the decision parse and the pool. Most of what remains is OPA: its handler
reports ~160 µs (input parse ~100 µs, eval, encode); the rest is the loopback round trip.
Through the whole gateway (``python -m bench --quick``, same machine, one caller) the OPA
path went from ~1.2 ms to ~0.3 ms added p50 over embedded. A Unix socket is within noise of
loopback TCP; its use is keeping the pod's other containers away from OPA (see
docs/deployment.md).

httpx stays for ``https://``: TLS settings (CA bundle, hostname checks, client
certificates) are where a small client would go wrong, and a remote OPA's network round
trip dwarfs httpx's CPU. Not ``opa-python-client``: it retries connection errors and
502/503/504 with sleeps inside the call, stretching a failing decision past the timeout
instead of failing closed at once.

Straight to OPA, never through a proxy: one would see every policy input and could answer
``allow`` itself. ``policies._http`` does not read the environment; the httpx clients here
(``https://`` decisions, ``reload`` over every transport) have ``trust_env=False``, so
``HTTP_PROXY``, ``HTTPS_PROXY`` and ``ALL_PROXY`` do not apply to them. That switch would
also drop ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, so without ``ca_file`` (``policy.opa_ca_file``)
``_tls_context`` keeps httpx's default choice of certificates; with it, OPA's certificate must
chain to that bundle alone.

The whole call (waiting for a pooled connection, dialing, the exchange, and the one retry
``policies._http`` allows on a stale kept-alive connection) is bounded by ``timeout_ms``
with ``asyncio.timeout``; a timed-out or cancelled request aborts its connection.

Failing closed: a connection error, timeout, non-200 answer, malformed HTTP, an answer over
16 MiB, or a body that is not a JSON object read strictly (``gateway.json_keys.strict_loads``: a key twice in
one object, ``NaN``, ``Infinity`` or a number past a double's range is refused, where
``json.loads`` would read ``{"decision": "deny", "decision": "allow"}`` as allow)
⇒ ``PolicyError("policy_unavailable")``; a 200 answer without
``result`` (undefined) or with a malformed decision ⇒ ``PolicyError("policy_invalid_decision")``.
Nothing to recover by hand: dead connections are dropped and new ones dialed, so once OPA
answers again decisions flow on the same engine object.

OPA's ``decision_id`` (present when OPA's decision logging is on) comes back on the
decision itself: ``decision.engine_decision_id`` — per evaluation, so it is correct under
concurrency. It is audited, so only printable ASCII up to 128 characters is kept (OPA writes a
UUID); another is dropped, and the decision stands.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import ssl
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from policies._decision import UNDEFINED, PolicyDecision, parse_decision
from policies._errors import POLICY_UNAVAILABLE, PolicyError, PolicyLoadError
from policies._encode import encode_json
from gateway.json_keys import NotStrictJson, strict_loads
from policies._http import Endpoint, Http11Pool, TransportError, refuse_url_extras

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""A larger answer from OPA is an error (``policy_unavailable``), over either transport."""
_DECISION_ID = re.compile(r"[\x21-\x7e]{1,128}")
"""What of OPA's ``decision_id`` is kept (it is audited): printable ASCII, at most 128 characters
(OPA writes a UUID); anything else is dropped, the decision itself standing."""

_PATH = re.compile(r"^data(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")  # \Z: "$" would let a final "\n" into the URL
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""What may be a surrogate in an answer: an escape of one, or one written in UTF-8's form (CESU-8)."""


class _Sender(Protocol):
    async def post(self, target: str, body: bytes) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


class OPAEngine:
    """A client of one OPA server; OPA loads and distributes the policy itself."""

    def __init__(
        self,
        url: str,
        *,
        query: str = "data.toolgate.decision",
        timeout_ms: int = 500,
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """Does not contact OPA (so the gateway starts and denies while OPA is down).

        ``url``: ``http://host:port[/prefix]``, ``unix:///path/to/opa.sock`` or ``https://...``.
        ``transport``: an httpx transport to use instead of the built-in client (a test seam).
        ``ca_file``: for ``https://``, the CA bundle (PEM) OPA's certificate must chain to,
        instead of ``SSL_CERT_FILE``, ``SSL_CERT_DIR`` or certifi.
        Raises ``ValueError`` for another kind of URL, one with credentials, a query or a
        fragment, a query that is not a ``data.a.b`` path, a non-positive timeout, or a
        ``ca_file`` with a URL that is not ``https://`` or that does not load.
        """
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
        refuse_url_extras(url)  # https too: the URL is shown in ``version`` and in errors
        self._url = url.rstrip("/")
        self._target = self._data_target(query)  # the decision's, made once
        self._timeout_ms, self._timeout_s = timeout_ms, timeout_ms / 1000
        https = urlsplit(self._url).scheme == "https"
        if ca_file is not None and not https:
            raise ValueError("ca_file applies to an https:// OPA URL only")
        self._ca_file = ca_file
        self._sender: _Sender
        if transport is not None or https:
            self._sender = _HttpxSender(self._url, self._timeout_s, transport, ca_file)
        else:
            self._sender = Http11Pool(Endpoint(self._url), max_body=MAX_ANSWER_BYTES)
        self._version = f"opa:{self._url}"

    @property
    def wait_bound_ms(self) -> int:
        """``evaluate`` and ``query`` await OPA for at most this long, then fail closed
        (``policy_unavailable``): every await of theirs is inside one ``asyncio.timeout``."""
        return self._timeout_ms

    @property
    def version(self) -> str:
        """``opa:sha256:<16 hex>`` over OPA's policies once ``reload()`` ran, else ``opa:<url>``."""
        return self._version

    async def evaluate(self, input: dict[str, Any]) -> PolicyDecision:
        """The decision for ``input``, carrying OPA's decision_id; raises ``PolicyError``."""
        body = await self._post(self._target, input)
        return parse_decision(body.get("result", UNDEFINED), engine_decision_id=_decision_id(body.get("decision_id")))

    async def query(self, path: str, input: dict[str, Any]) -> Any:
        """The value at ``path`` or ``UNDEFINED``; raises ``PolicyError`` when OPA fails."""
        return (await self._post(self._data_target(path), input)).get("result", UNDEFINED)

    async def reload(self) -> None:
        """Refresh ``version`` from OPA's loaded policies (OPA reloads bundles itself), asked in a
        thread: an OPA slow to answer held the event loop, and every call on it, for up to 2 s.

        Raises ``PolicyLoadError`` when OPA cannot be asked; the old version is kept.
        """
        self._version = await asyncio.to_thread(self._loaded_version)

    def _loaded_version(self) -> str:
        try:
            with _sync_client(self._url, max(self._timeout_s, 2.0), self._ca_file) as client:
                response = client.get("/v1/policies")
            response.raise_for_status()
            policies = response.json()["result"]
            digest = hashlib.sha256()
            for policy in sorted(policies, key=lambda p: p["id"]):
                digest.update(policy["id"].encode() + b"\0" + policy["raw"].encode() + b"\0")
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PolicyLoadError(f"{self._url}: cannot list OPA's policies: {type(exc).__name__}: {exc}") from exc
        return "opa:sha256:" + digest.hexdigest()[:16]

    async def close(self) -> None:
        """Close the pooled connections; later evaluations fail with ``policy_unavailable``."""
        await self._sender.aclose()

    async def _post(self, target: str, input: dict[str, Any]) -> dict[str, Any]:
        try:
            request = b'{"input":' + encode_json(input) + b"}"  # a lone surrogate fails here, unsent
        except (TypeError, ValueError, RecursionError) as exc:
            raise PolicyError(POLICY_UNAVAILABLE, f"input is not JSON-serialisable: {exc}") from exc
        try:
            async with asyncio.timeout(self._timeout_s):
                status, content = await self._sender.post(target, request)
        except TimeoutError as exc:
            raise PolicyError(POLICY_UNAVAILABLE, f"OPA did not answer within {self._timeout_s * 1000:.0f} ms") from exc
        except (TransportError, OSError, TypeError, ValueError) as exc:
            raise PolicyError(POLICY_UNAVAILABLE, f"OPA request failed: {type(exc).__name__}: {exc}") from exc
        if status != 200:
            text = content[:500].decode("utf-8", "replace")
            raise PolicyError(POLICY_UNAVAILABLE, f"OPA answered {status}: {text}")
        try:
            body = strict_loads(content)
        except NotStrictJson as exc:
            raise PolicyError(POLICY_UNAVAILABLE, f"OPA answered with a body that is not strict JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise PolicyError(POLICY_UNAVAILABLE, "OPA answered with a body that is not an object")
        if _SURROGATE.search(content) and _lone_surrogate(body):  # text with no UTF-8 form: no record could hold it
            raise PolicyError(POLICY_UNAVAILABLE, "OPA answered with a body that is not strict JSON: "
                                                  "a string holds a lone surrogate")
        return body

    @staticmethod
    def _data_target(path: str) -> str:
        """``data.a.b`` as the Data API's ``/v1/data/a/b``; raises ``ValueError`` for anything else."""
        if not _PATH.match(path):
            raise ValueError(f"not a data path OPA's Data API can serve: {path!r}")
        return "/v1/data/" + path.removeprefix("data").lstrip(".").replace(".", "/")


class _HttpxSender:
    """``https://`` OPA (or a test transport): httpx, its errors translated to ours."""

    def __init__(self, url: str, timeout_s: float, transport: httpx.AsyncBaseTransport | None,
                 ca_file: str | os.PathLike[str] | None = None, max_body: int = MAX_ANSWER_BYTES) -> None:
        self._max_body = max_body
        self._client = httpx.AsyncClient(
            base_url=url,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            transport=transport,
            verify=_tls_context(ca_file) if transport is None else True,
            trust_env=False,  # no proxy from the environment (module docstring)
        )

    async def post(self, target: str, body: bytes) -> tuple[int, bytes]:
        if self._client.is_closed:
            raise TransportError("the OPA client is closed")
        try:
            async with self._client.stream("POST", target, content=body,
                                           headers={"Content-Type": "application/json"}) as response:
                content = bytearray()
                async for chunk in response.aiter_bytes():  # read no further than the cap
                    content += chunk
                    if len(content) > self._max_body:
                        raise TransportError(f"OPA's answer is over {self._max_body} bytes")
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code, bytes(content)

    async def aclose(self) -> None:
        await self._client.aclose()


def _sync_client(url: str, timeout_s: float, ca_file: str | os.PathLike[str] | None = None) -> httpx.Client:
    """A one-off client for ``reload`` (not on the hot path), Unix socket URLs included; no
    proxy from the environment (module docstring)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        transport = httpx.HTTPTransport(uds=parts.path, trust_env=False)
        return httpx.Client(base_url="http://localhost", timeout=timeout_s, transport=transport, trust_env=False)
    return httpx.Client(base_url=url, timeout=timeout_s, verify=_tls_context(ca_file), trust_env=False)


def _tls_context(ca_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """What ``https://`` OPA is verified against: ``ca_file`` alone when given, else as httpx
    chooses by default: the CA file in ``SSL_CERT_FILE``, else the CA folder in
    ``SSL_CERT_DIR``, else certifi's bundle (made here because ``trust_env=False``, there to
    keep proxies out, would drop the first two). Either way hostnames are checked.

    Raises ``ValueError`` when ``ca_file`` does not load.
    """
    if ca_file is None:
        return httpx.create_ssl_context(trust_env=True)
    try:
        return ssl.create_default_context(cafile=os.fspath(ca_file))
    except OSError as exc:  # ssl.SSLError included: no PEM certificate in it
        raise ValueError(f"OPA CA file {os.fspath(ca_file)!r} does not load: {type(exc).__name__}: {exc}") from exc


def _decision_id(value: Any) -> str | None:
    """OPA's ``decision_id`` when it is one an audit record may hold (``_DECISION_ID``), else None."""
    return value if isinstance(value, str) and _DECISION_ID.fullmatch(value) else None


def _lone_surrogate(value: Any) -> bool:
    """Whether a string in ``value`` (a key or a value, at any depth) has no UTF-8 form."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
