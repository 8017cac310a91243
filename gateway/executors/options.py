"""Each executor kind's ``executor.options``, typed and checked when the config loads; and what
tools ask of their executors (``refuse_unusable_executors``), checked at load as well.

An option a kind does not read, a value of the wrong type (``"false"`` for ``false``: a quoted
string is never read as a flag) or a limit that is not positive is a config error naming the
tool and the option, never something an executor finds (or misreads) at call time.

- http: ``allow_plain_http`` (bool, false: https only), ``allow_private_network`` (bool, false:
  hosts resolving to non-public addresses are refused), ``max_response_bytes`` (int > 0, 1048576),
  ``max_redirects`` (int 0-20, 3: same-origin redirects followed), ``headers`` (name → value,
  printable ASCII; {}).
- subprocess: ``allow_dash_values`` (bool, false: an argument may not fill an element starting with
  ``-``), ``max_output_bytes`` (int > 0, 1048576, stdout and stderr each), ``output`` (``text`` or
  ``json``; text).
- python, mcp: none (an MCP upstream's settings are in ``mcp_upstreams``).
"""

from __future__ import annotations

import re
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

DEFAULT_MAX_BYTES = 1024 * 1024
"""The default cap of an http response body and of a subprocess's stdout and stderr, each."""
DEFAULT_MAX_REDIRECTS = 3

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
"""An RFC 9110 token: what a header name may be."""
_HEADER_VALUE = re.compile(r"^(?:[!-~](?:[ \t!-~]*[!-~])?)?\Z")
"""An RFC 9110 field value in ASCII: no control character, no space or tab at either end."""


class _Options(BaseModel):
    """Strict: YAML gives booleans and integers their own types, so a string is never taken for one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class HttpOptions(_Options):
    allow_plain_http: bool = False
    """Allow ``http://`` URLs too (tests, loopback services); otherwise https only."""
    allow_private_network: bool = False
    """Allow hosts that resolve to loopback, private, link-local or other non-public addresses."""
    max_response_bytes: int = Field(default=DEFAULT_MAX_BYTES, gt=0)
    """Body bytes read; beyond them reading stops and the result is marked truncated."""
    max_redirects: int = Field(default=DEFAULT_MAX_REDIRECTS, ge=0, le=20)
    """Same-origin redirects followed (each re-checked); 0 follows none."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Fixed request headers; credentials of the same name replace them; accept-encoding is always identity."""

    @field_validator("headers")
    @classmethod
    def _headers_are_sendable(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME.match(name):
                raise PydanticCustomError("header_name_invalid", "header name '{name}' is not an HTTP token "
                                          "(letters, digits and !#$%&'*+-.^_`|~ only)", {"name": name})
            if not _HEADER_VALUE.match(text):
                raise PydanticCustomError("header_value_invalid", "header '{name}': its value must be printable "
                                          "ASCII, with no line break and no space at either end", {"name": name})
        return value


class SubprocessOptions(_Options):
    allow_dash_values: bool = False
    """Let an argument fill in an argv element that starts with ``-`` (option injection: off by default)."""
    max_output_bytes: int = Field(default=DEFAULT_MAX_BYTES, gt=0)
    """Bytes of stdout and of stderr kept, each; the rest is drained and dropped."""
    output: Literal["text", "json"] = "text"
    """``json``: stdout is parsed as JSON (a ``tool_error`` if it is not); ``text``: ``{exit_code, stdout}``."""


class NoOptions(_Options):
    """The python and mcp executors read no options."""


ExecutorOptions = HttpOptions | SubprocessOptions | NoOptions
OPTIONS: dict[str, type[_Options]] = {"http": HttpOptions, "subprocess": SubprocessOptions,
                                      "python": NoOptions, "mcp": NoOptions}


def parse_options(kind: Any, raw: Any) -> ExecutorOptions:
    """``raw`` (the YAML mapping, or None when absent) as ``kind``'s options; raises
    ``ValidationError`` located at the option. An unknown ``kind`` (refused on its own) gives none."""
    model = OPTIONS.get(kind) if isinstance(kind, str) else None
    if model is None:
        return NoOptions()
    if raw is None:
        raw = {}
    if isinstance(raw, dict):
        unknown = [name for name in raw if name not in model.model_fields]
        if unknown:
            known = ", ".join(model.model_fields) or "none"
            errors: list[InitErrorDetails] = [
                {"type": PydanticCustomError("unknown_option", "the {kind} executor has no option '{name}' (its "
                                             "options: {known})", {"kind": kind, "name": str(name), "known": known}),
                 "loc": (str(name),), "input": raw[name]}
                for name in unknown]
            raise ValidationError.from_exception_data(model.__name__, errors, hide_input=True)
    return cast(ExecutorOptions, model.model_validate(raw))


def refuse_unusable_executors(config: Any) -> None:
    """What a descriptor asks of its executor is checked at load, not ignored at each call: an
    egress allow-list only the http executor reads, an MCP upstream that is not configured, a
    ``constraints.hosts`` narrowing for a stdio upstream (a process, which can reach any host).
    Raises ``PydanticCustomError`` (``config`` is a ``gateway.config.Config`` being validated)."""
    transports = _upstream_transports(config.mcp_upstreams)
    for tool in config.tools:
        ex = tool.executor
        if ex.allowed_hosts and ex.kind != "http":
            raise PydanticCustomError(
                "allowed_hosts_unused",
                "tool '{name}': executor.allowed_hosts is read by the http executor only and would be "
                "ignored for a {kind} tool; remove it (constraints.hosts narrows a python or HTTP MCP tool)",
                {"name": tool.name, "kind": ex.kind})
        if ex.kind != "mcp":
            continue
        transport = transports.get(ex.server)
        if transport is None:
            known = ", ".join(sorted(transports)) or "none are configured"
            raise PydanticCustomError(
                "mcp_upstream_unknown", "tool '{name}': executor.server '{server}' names no entry of "
                "mcp_upstreams ({known})", {"name": tool.name, "server": ex.server, "known": known})
        if transport == "stdio" and tool.constraints.get("hosts") is not None:
            raise PydanticCustomError(
                "hosts_unenforceable",
                "tool '{name}': constraints.hosts cannot be enforced for a tool of the stdio MCP upstream "
                "'{server}' (a process cannot be confined to hosts); remove it, or serve the upstream "
                "over HTTP", {"name": tool.name, "server": ex.server})


def _upstream_transports(raw: dict[str, Any]) -> dict[str, str]:
    """Each MCP upstream's transport, the upstreams parsed as the executor will (a malformed one is
    refused at load, not at its first call)."""
    if not raw:
        return {}
    from gateway.executors.mcp import McpConfigError, parse_upstreams

    try:
        return {name: up.transport for name, up in parse_upstreams(raw).items()}
    except McpConfigError as exc:
        raise PydanticCustomError("mcp_upstream_invalid", "{problem}", {"problem": str(exc)}) from None
