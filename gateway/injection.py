"""Flag tool output that looks like instructions aimed at the model (prompt injection).

Detection only: the content stays data, unchanged, and the observation gets the flag
``possible_prompt_injection`` so the runtime client (and policy on later steps) can treat it
with suspicion. Heuristics, deliberately cheap: instruction-override phrases, chat-role
headers at the start of a line (``SYSTEM:``, ``<|im_start|>system``, ``[INST]``), and
tool-call syntax (``<tool_call>``, ``"function_call":``, ``<function=...>``).
"""

from __future__ import annotations

import re
from typing import Any, Iterator

POSSIBLE_PROMPT_INJECTION = "possible_prompt_injection"

MAX_SCAN_CHARS = 1_000_000
"""Text scanned per observation; beyond it the output is not examined further."""

PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(
        r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|all|your|system)\b"
        r"[^.\n]{0,40}?\b(?:instructions?|prompts?|rules|directions|guidelines|context)\b",
        re.I,
    ),
    re.compile(r"\byou are now\b|\bnew instructions?\s*:|\bact as (?:an? )?(?:system|admin|developer)\b", re.I),
    # the leading white space stops at the line's end ([^\S\n]), and one \s* comes before the colon:
    # a \s* tried from every line start runs to the end of a block of blank lines each time, and two
    # that can share the spaces before a missing colon try every split; both quadratic. Same texts flagged.
    re.compile(r"(?im)^[^\S\n]*(?:#+\s*)?(?:system|assistant|developer)\s*(?:prompt\s*)?:"),
    re.compile(r"<\|im_start\|>|<\|(?:system|assistant|user)\|>|\[/?INST\]|<<SYS>>|</?system>", re.I),
    re.compile(r"</?tool_call>|</?function_calls?>|<function=|\"(?:function_call|tool_calls)\"\s*:|<invoke\b", re.I),
)
"""The heuristics. Each runs in linear time on any text: the text is the tool's, and ``re`` has no
step limit and holds the GIL (tests/executors/test_output_patterns_linear.py)."""


def injection_flags(*parts: Any) -> tuple[str, ...]:
    """``("possible_prompt_injection",)`` if any string in ``parts`` (walked as JSON) matches."""
    budget = MAX_SCAN_CHARS
    for text in _strings(parts):
        chunk = text[:budget]
        if any(p.search(chunk) for p in PATTERNS):
            return (POSSIBLE_PROMPT_INJECTION,)
        budget -= len(chunk)
        if budget <= 0:
            break
    return ()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
