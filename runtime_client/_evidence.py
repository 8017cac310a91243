"""Answering a policy's ``require_more_evidence``: what the application's evidence provider is
asked, and how its answer is read. ``run_agent``/``resume`` and the framework adapters share it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime_client._types import EvidenceRequired


@dataclass(frozen=True, slots=True)
class EvidenceRequest:
    """What the policy asked for before a call may go on (``require_more_evidence``), for the
    application's ``evidence`` provider (``run_agent``, the adapters)."""

    tool: str
    input: dict[str, Any]
    missing: tuple[str, ...]
    """The evidence keys the policy named."""
    reasons: tuple[str, ...]
    given: dict[str, Any]
    """The evidence the call was sent with ({} for none)."""


EvidenceProvider = Callable[[EvidenceRequest], Any]
"""Returns (or awaits to) a dict of evidence to send the call again with, or None to let the call
stand as the policy answered it (a run stops ``blocked``; an adapter reports a tool error)."""


def evidence_request(tool: str, args: dict[str, Any], outcome: EvidenceRequired,
                     given: dict[str, Any] | None) -> EvidenceRequest:
    """The request for a call of ``tool`` with ``args``, sent with ``given``, that ``outcome``
    answered."""
    return EvidenceRequest(tool, dict(args), tuple(outcome.missing), tuple(outcome.reasons),
                           dict(given or {}))


async def ask_evidence(provider: EvidenceProvider, request: EvidenceRequest) -> dict[str, Any] | None:
    """What ``provider`` gives for ``request`` (awaited if it is awaitable): a dict, or None.

    Anything else raises ``TypeError``; whatever the provider raises propagates."""
    given = provider(request)
    if inspect.isawaitable(given):
        given = await given
    if given is not None and not isinstance(given, dict):
        raise TypeError(f"the evidence provider gave {type(given).__name__}, not a dict or None")
    return given
