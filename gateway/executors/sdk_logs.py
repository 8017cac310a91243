"""What the MCP SDK logs about an upstream, with the upstream's own words withheld.

The SDK logs what it could not handle together with it: a stdout line that is not JSON-RPC
(``logger.exception``: the parse error quotes the line), an SSE event, a response body. That
is upstream output the scrubber never saw, which may hold the credentials injected into the
upstream, and it would land in the gateway's stderr (Python's last-resort handler, or the
operator's logging). So the ``mcp`` logger gets a handler of its own and does not propagate:
each record is printed as the logger, the level and the exception type only.
"""

from __future__ import annotations

import logging
import sys

SDK_LOGGER = "mcp"


class WithholdDetails(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        record.msg = (f"mcp sdk {record.levelname.lower()} in {record.name}{f' ({kind})' if kind else ''}: "
                      "details withheld, they may hold an upstream's output")
        record.args, record.exc_info, record.exc_text, record.stack_info = None, None, None, None
        return True


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes, as Python's last resort does."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # noqa: ANN001
        pass


def withhold_sdk_details() -> None:
    """Install the handler (once); ``mcp.*`` records no longer reach other handlers."""
    sdk = logging.getLogger(SDK_LOGGER)
    if any(isinstance(f, WithholdDetails) for h in sdk.handlers for f in h.filters):
        return
    handler = _Stderr()
    handler.addFilter(WithholdDetails())
    handler.setLevel(logging.WARNING)
    sdk.addHandler(handler)
    sdk.propagate = False
