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
"""The size at which each pattern is checked to take linear time (tests/executors/test_output_patterns_linear.py),
well above what an observation shows with the default limits (its data, 64 KiB, as text and as its
strings; its error message and summary, 4,210 characters). There is no cut-off: everything given
is scanned, so the caller gives what the model is shown, no more. (A cut-off at this many
characters scanned the start of a large stderr and missed its end, which the model was shown.)"""

_INSTRUCTION_OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|all|your|system)\b"
    r"[^.\n]{0,40}?\b(?:instructions?|prompts?|rules|directions|guidelines|context)\b",
    re.I,
)
_TOOL_CALL_SYNTAX = re.compile(
    r"</?tool_call>|</?function_calls?>|<function=|\"(?:function_call|tool_calls)\"\s*:|<invoke\b", re.I)

PATTERNS: tuple[re.Pattern[str], ...] = (
    _INSTRUCTION_OVERRIDE,
    re.compile(r"\byou are now\b|\bnew instructions?\s*:|\bact as (?:an? )?(?:system|admin|developer)\b", re.I),
    # the leading white space stops at the line's end ([^\S\n]), and one \s* comes before the colon:
    # a \s* tried from every line start runs to the end of a block of blank lines each time, and two
    # that can share the spaces before a missing colon try every split; both quadratic. Same texts flagged.
    re.compile(r"(?im)^[^\S\n]*(?:#+\s*)?(?:system|assistant|developer)\s*(?:prompt\s*)?:"),
    re.compile(r"<\|im_start\|>|<\|(?:system|assistant|user)\|>|\[/?INST\]|<<SYS>>|</?system>", re.I),
    _TOOL_CALL_SYNTAX,
)
"""The heuristics. Each runs in linear time on any text: the text is the tool's, and ``re`` has no
step limit and holds the GIL (tests/executors/test_output_patterns_linear.py)."""

ACROSS_STRINGS: tuple[re.Pattern[str], ...] = (_INSTRUCTION_OVERRIDE, _TOOL_CALL_SYNTAX)
"""The patterns that can match data's JSON text where they match none of its strings: an
instruction whose words are in neighbouring strings (``","`` is no gap's end), and a
``"tool_calls":`` key, its quotes and colon the text's. The others cannot: the role header needs a
line start (the text has none but its first character, a bracket or a quote), and a match of the
rest (letters, spaces, ``<|[]/>``) lies inside one string and reads the same there."""


def injection_flags(*parts: Any) -> tuple[str, ...]:
    """``("possible_prompt_injection",)`` if any string in ``parts`` (walked as JSON) matches.

    Every string is scanned whole: the time is linear in what the caller gives, which is what the
    model is shown (``gateway.normalize`` gives an observation's parts, each capped)."""
    for text in _strings(parts):
        if any(p.search(text) for p in PATTERNS):
            return (POSSIBLE_PROMPT_INJECTION,)
    return ()


def json_text_flags(text: str) -> tuple[str, ...]:
    """The flag for the JSON ``text`` of data whose strings ``injection_flags`` scans too: what only
    the text shows (``ACROSS_STRINGS``). A line break in a string, ``\\n`` in the text, still ends
    the line there, as in the string: an instruction is not read across lines here either."""
    lines = text.replace("\\n", "\n")
    return (POSSIBLE_PROMPT_INJECTION,) if any(p.search(lines) for p in ACROSS_STRINGS) else ()


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
