"""The config's checks that read one setting's text (``listen``, ``policy.query``) or look across
settings (``Config._settings_agree``), each error at the path of the setting to blame.

A check that spans the file used to fail as ``(top level): Value error, ...``: now every problem
is ``(loc, code, message)`` and ``refuse`` raises them together, so ``load_config`` prints
``toolgate.yaml: workers: ...`` and the operator knows which line to change.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable
from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:
    from gateway.config import Config

Loc = tuple[str | int, ...]
Problem = tuple[Loc, PydanticCustomError]


def problem(loc: Loc, code: str, message: str, **context: Any) -> Problem:
    """A problem at ``loc`` (relative to the model being validated); ``message`` may hold ``{name}``
    placeholders filled from ``context``."""
    return loc, PydanticCustomError(code, message, context)


def refuse(model: str, problems: Iterable[Problem]) -> None:
    """Raise one ``ValidationError`` carrying every problem at its own path (none: return)."""
    errors = [{"type": error, "loc": loc, "input": None} for loc, error in problems]
    if errors:
        raise ValidationError.from_exception_data(model, errors)  # type: ignore[arg-type]


# --- one setting's text ------------------------------------------------------------------------

_LISTEN_FORM = ("give HOST:PORT, e.g. 127.0.0.1:50051, 0.0.0.0:50051, localhost:50051 or [::1]:50051 "
                "(an IPv6 address in brackets; port 0 picks a free one)")
_HOST_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,253}\Z")


def listen_problem(address: str) -> str:
    """Why ``address`` is no ``HOST:PORT`` the gateway can listen on ("" when it is). It is checked
    here because gRPC takes what it is given: a port over 65535 wrapped (99999 listened on 34463)."""
    if address.startswith("["):
        end = address.find("]")
        host, rest = (address[1:end], address[end + 1:]) if end > 0 else (address[1:], "")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{address[:64]!r} is not an IPv6 address in brackets; {_LISTEN_FORM}"
        if not rest.startswith(":"):
            return f"no port after the IPv6 address; {_LISTEN_FORM}"
        port = rest[1:]
    else:
        host, colon, port = address.rpartition(":")
        if not colon:
            return f"no port; {_LISTEN_FORM}"
        if ":" in host:
            return f"an IPv6 address goes in brackets, the port after them; {_LISTEN_FORM}"
        if not host:
            return ("no host: give 127.0.0.1:PORT (this machine only), 0.0.0.0:PORT (every IPv4 interface) "
                    "or [::]:PORT (every interface)")
        if not _HOST_NAME.match(host):
            return f"host {host[:64]!r} is not a host name or address; {_LISTEN_FORM}"
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        return f"port {port[:16]!r} is not a number from 0 to 65535 (0 picks a free one)"
    return ""


_RULE_PATH = re.compile(r"^data(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")
"""A rule's path as both engines evaluate it and OPA's Data API serves it (``/v1/data/a/b``)."""


def query_problem(query: str) -> str:
    """Why ``policy.query`` names no rule ("" when it does): the embedded engine failed every call
    with such a query (``policy_unavailable``), and the OPA engine did not start."""
    if _RULE_PATH.match(query):
        return ""
    return (f"{query[:80]!r} is not a rule path: give data.<package>.<rule>, names of letters, digits "
            "and _ joined by dots (the default is data.toolgate.decision)")


# --- across settings ---------------------------------------------------------------------------


def settings_problems(config: Config) -> list[Problem]:
    """Every problem of ``config`` (validated field by field already) that lies between settings."""
    return [*_one_key_one_identity(config), *_sections_name_what_exists(config), *_unique_tool_names(config),
            *_what_workers_cannot_enforce(config), *_executor_problems(config), *_opa_ca_file_problems(config)]


def _one_key_one_identity(config: Config) -> Iterable[Problem]:
    """One key is one identity: else the last one listed acts for it, in its tenant."""
    first: dict[str, Any] = {}
    for i, ident in enumerate(config.identities):
        if (other := first.setdefault(ident.api_key_sha256, ident)) is not ident:
            yield problem(("identities", i, "api_key_sha256"), "config_inconsistent", "{problem}",
                          problem=f"identities '{other.name}' and '{ident.name}' have the same key (it would act "
                          "as the last one only); give each its own key")


def _sections_name_what_exists(config: Config) -> Iterable[Problem]:
    """An approver's id is in the keyring (else each of its votes is refused as if the key lacked
    the role); a file secret provider's folder is there."""
    from gateway.approvals.config import ApprovalsConfig, approver_identity_problems
    from gateway.credentials import missing_secret_dirs

    found = approver_identity_problems(config.identities, ApprovalsConfig.model_validate(config.approvals))
    found += missing_secret_dirs(config.secrets, Path(config.base_dir))
    return [problem(loc, "config_inconsistent", "{problem}", problem=text) for loc, text in found]


def _unique_tool_names(config: Config) -> Iterable[Problem]:
    first: dict[str, int] = {}
    for i, tool in enumerate(config.tools):
        if (at := first.setdefault(tool.name, i)) != i:
            yield problem(("tools", i, "name"), "tool_name_repeated",
                          "tool '{name}' is also tools.{first}: tool names must be unique; rename or remove one",
                          name=tool.name, first=at)


def _what_workers_cannot_enforce(config: Config) -> Iterable[Problem]:
    """Caps kept in one process's memory do not hold across several."""
    if config.workers == 1:
        return
    capped = [t.name for t in config.tools if t.max_concurrency]
    if capped:
        yield problem(("workers",), "workers_per_process_cap",
                      "{workers} workers cannot enforce max_concurrency (a per-process cap) of tools {tools}; "
                      "remove the caps or run one worker", workers=config.workers, tools=", ".join(capped))
    if config.observability.get("metrics_port") is not None:
        yield problem(("workers",), "workers_metrics_port",
                      "{workers} workers cannot share one observability.metrics_port; run one worker for metrics, "
                      "or remove metrics_port", workers=config.workers)


_EXECUTOR_SETTING: dict[str, tuple[str, ...]] = {
    "allowed_hosts_unused": ("executor", "allowed_hosts"),
    "mcp_upstream_unknown": ("executor", "server"),
    "hosts_unenforceable": ("constraints", "hosts"),
}
"""The tool setting each of ``refuse_unusable_executors``' errors is about."""


def _executor_problems(config: Config) -> Iterable[Problem]:
    """What a descriptor asks of its executor (``gateway.executors.options``), at the tool's setting."""
    from gateway.executors.options import refuse_unusable_executors

    try:
        refuse_unusable_executors(config)
    except PydanticCustomError as exc:
        names = [t.name for t in config.tools]
        name = (exc.context or {}).get("name")
        if exc.type == "mcp_upstream_invalid":
            yield ("mcp_upstreams",), exc
        elif exc.type in _EXECUTOR_SETTING and name in names:
            yield ("tools", names.index(name), *_EXECUTOR_SETTING[exc.type]), exc
        else:
            yield (), exc


def _opa_ca_file_problems(config: Config) -> Iterable[Problem]:
    """A set ``policy.opa_ca_file`` is an https OPA's trust anchor: it must load now, not at the first call."""
    policy = config.policy
    if not policy.opa_ca_file:
        return
    at = ("policy", "opa_ca_file")
    if urlsplit(policy.opa_url).scheme != "https":
        yield problem(at, "opa_ca_file_needs_https", "set, but policy.opa_url is not https:// (the CA file is "
                      "only for an https OPA); remove opa_ca_file or give an https:// opa_url")
        return
    path = str(config.resolve(policy.opa_ca_file))
    try:
        ssl.create_default_context(cafile=path)
    except FileNotFoundError:
        yield problem(at, "opa_ca_file_missing", "{path}: no such file", path=path)
    except ssl.SSLError:  # before OSError, its base: the file was read
        yield problem(at, "opa_ca_file_invalid", "{path}: no PEM certificate in it", path=path)
    except OSError as exc:
        yield problem(at, "opa_ca_file_unreadable", "{path}: cannot be read ({why})", path=path,
                      why=exc.strerror or type(exc).__name__)
