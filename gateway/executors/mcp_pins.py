"""What the MCP executor remembers of its upstreams' tool listings, bounded by the config.

Every session lists the upstream's tools. The listing is what a classification is checked
against, so it is bounded first: a listing of more than the upstream's ``max_tools`` tools
(``DEFAULT_MAX_TOOLS``) is refused whole — the call is a ``tool_error``, not retryable,
naming the option — and nothing of it is kept: a listing cut to the bound would leave the
remote tool unchecked or a change unlogged.

The baseline pins the tools that can be called, and only those: a remote tool a descriptor
names (``classified``). Its definition (description and schema) as this process first sees
it listed is its baseline, also when it is first listed after other listings; a call to it
whose listing shows another definition is refused unless the upstream sets
``pin_tools: false`` — a changed tool has not been classified. A tool no descriptor names is
not callable and not pinned, so what the baseline holds is bounded by the descriptors however
many names an upstream lists over time. The descriptors are given up front by the config
(``McpExecutor.from_config``); a remote tool a call names is taken as classified too (a call
comes from a descriptor), so an executor built without them pins it from its first call's
listing.

Any difference between two listings of an upstream (tools added, removed or changed) is
logged as ``mcp_upstream_tools_changed``, the names scrubbed of the call's secrets, escaped and
cut (an upstream chooses them, and may put a secret it was given in one); for that the last
listing's fingerprints are kept, at most ``max_tools`` of them per upstream.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

import structlog

from gateway.audit import escaped
from gateway.scrub import Scrubber

log = structlog.get_logger("toolgate.mcp")

DEFAULT_MAX_TOOLS = 1024
"""How many tools one listing of an upstream may hold by default: more than servers commonly
offer, few enough that what is kept of a listing (names and hashes) stays small."""


def tool_fingerprints(tools: list[Any]) -> dict[str, str]:
    """name → sha256 over the tool's description and input schema."""
    return {
        t.name: hashlib.sha256(
            json.dumps([t.description or "", t.input_schema], sort_keys=True, default=str).encode()
        ).hexdigest()
        for t in tools
    }


def classified_remote_tools(tools: Iterable[Any]) -> dict[str, set[str]]:
    """upstream name → the remote tools descriptors (``gateway.config.ToolConfig``) name on it."""
    classified: dict[str, set[str]] = {}
    for tool in tools:
        if tool.executor.kind == "mcp":
            classified.setdefault(tool.executor.server, set()).add(tool.executor.remote_tool or tool.name)
    return classified


class ToolPins:
    """Per upstream: the classified tools' baselines and the last listing (module docstring)."""

    def __init__(self, classified: Mapping[str, Iterable[str]] | None = None) -> None:
        self._classified = {upstream: set(names) for upstream, names in (classified or {}).items()}
        self._baseline: dict[str, dict[str, str]] = {}
        self._last: dict[str, dict[str, tuple[str, str]]] = {}
        """Per upstream, its last listing: name → (fingerprint, the name as a log may show it)."""

    def pinned(self, upstream: str) -> dict[str, str]:
        """The baselines of ``upstream``'s tools: name → fingerprint (a copy)."""
        return dict(self._baseline.get(upstream, {}))

    def check(self, upstream: str, remote: str, tools: list[Any], *, pin: bool, max_tools: int,
              secrets: Iterable[str] = ()) -> str | None:
        """Why the call to ``remote`` may not go on after this listing, or None; the listing is
        recorded (when within ``max_tools``). ``remote`` is a classified tool of ``upstream``;
        ``secrets``, the call's, are kept out of the names a change is logged with."""
        self._classified.setdefault(upstream, set()).add(remote)
        if len(tools) > max_tools:
            log.warning("mcp_upstream_listing_refused", upstream=upstream, tools=len(tools), max_tools=max_tools)
            return (f"MCP upstream {upstream} lists {len(tools)} tools, more than the {max_tools} the gateway "
                    f"keeps track of; refused. If it really offers that many, raise mcp_upstreams.{upstream}.max_tools")
        seen = tool_fingerprints(tools)
        self._log_changes(upstream, seen, secrets)
        if remote not in seen:
            return f"upstream {upstream} does not offer {remote!r}"
        if not pin:
            return None
        baseline = self._baseline.setdefault(upstream, {})
        for name in self._classified[upstream] & (seen.keys() - baseline.keys()):
            baseline[name] = seen[name]  # pinned as first listed, also one listed late
        if baseline[remote] != seen[remote]:
            return f"upstream {upstream} changed {remote!r} since it was classified; refused"
        return None

    def _log_changes(self, upstream: str, seen: dict[str, str], secrets: Iterable[str]) -> None:
        """Log what changed since the upstream's last listing. A name is kept as a log may show it
        when it is first listed, scrubbed with the secrets of the call that listed it: a removed
        name was listed under another call's secrets, which this call does not know."""
        first, last = upstream not in self._last, self._last.get(upstream, {})
        new = seen.keys() - last.keys()
        scrubber = Scrubber(secrets) if new else None
        self._last[upstream] = {
            name: (fingerprint, _shown_name(name, scrubber) if scrubber and name in new else last[name][1])
            for name, fingerprint in seen.items()
        }
        if first:
            return
        shown = self._last[upstream]
        added = [shown[name][1] for name in new]
        removed = [kept for name, (_, kept) in last.items() if name not in seen]
        changed = [shown[name][1] for name in seen.keys() & last.keys() if last[name][0] != seen[name]]
        if added or removed or changed:
            log.warning("mcp_upstream_tools_changed", upstream=upstream, added=_listed(added),
                        removed=_listed(removed), changed=_listed(changed))


LOGGED_NAMES = 50
"""Names of a change logged at the most (the rest are counted)."""


def _shown_name(name: str, scrubber: Scrubber) -> str:
    """A tool name an upstream chose, as a log may hold it: scrubbed of the listing call's secrets
    (a server can put one in a name), escaped, cut to 64 characters."""
    return escaped(scrubber.text(name)[0])


def _listed(names: Iterable[str]) -> list[str]:
    """``names`` (shown forms) sorted, at most ``LOGGED_NAMES`` of them, the rest counted."""
    ordered = sorted(names)
    if len(ordered) > LOGGED_NAMES:
        return [*ordered[:LOGGED_NAMES], f"... and {len(ordered) - LOGGED_NAMES} more"]
    return ordered
