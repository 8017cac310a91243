"""A static check for ECMA-262 patterns that backtrack catastrophically.

``regress`` backtracks with no step limit and holds the GIL while it runs: ``^(a+)+$`` against
a 40-character argument freezes a gateway worker for hours, and the agent writing the arguments
can read the schema. So a tool schema with such a pattern does not load
(``ecma_regex.schema_problems``); nothing here runs on a call. ``assess(pattern)`` says which
rule a pattern (one that compiles in Unicode mode) breaks; ``backtracking_risk`` gives the reason.

Each part of the pattern (parsed by ``gateway.pattern_parse``) has the characters it can
consume, start and end with; a repetition is *variable* or *unbounded* as defined there, and a
lookaround's body is checked where it stands. Walking a sequence, a variable repetition stays
*open* until a mandatory character it cannot match follows. A later variable repetition that
can start with a character an open one matches *meets* it, unless a mandatory character between
them cannot be matched by the later one (then the later one's runs cannot overlap). Meeting
repetitions can divide the same characters in several ways, and a failing match tries them all.

exponential — a repetition that can iterate more than once (``*``, ``+``, ``{n,}``, ``{n,m}``
  with m >= 2, fixed ``{n}`` with n >= 2) whose body (1) holds two repetitions that meet, in
  one iteration or across two; (2) leaves a variable repetition open that the next iteration
  can start like (``(a+)+``, ``(\\w+\\s?)*``, ``(a{2}a?)*``); or (3) holds alternatives that can
  start with the same character (``(a|ab)*``, ``(\\w|\\d)+``). No exemption for small bounds:
  ``(a{1,2})+`` grows like Fibonacci, and regress is quadratic even on ``(?:b(?:b|b)?){2}$``.
  ``(a?)*`` passes (an empty iteration ends the loop), as does ``(\\d{1,3}\\.){3}``.
engine_bug — such a repetition holding a quantifier over something that can match the empty
  string (``(?:(?:1|)?){2}$``, ``(?:x(?:1|\\b)?)*$``): on some strings regress loops until
  memory runs out and aborts the whole process.
polynomial — two unbounded repetitions that meet, when something after the second can still
  fail (``\\d+\\d+$``, ``^[a-z]+[a-z0-9]*$``, ``.*.*=.*``). An unanchored pattern is tried from
  every position, which counts as an unbounded repetition of anything before it: ``\\w+$`` is
  quadratic, ``[0-9]+`` alone is not. k repetitions meeting in a chain cost O(n^k) on a failing
  n-character string (``Risk.degree``); ``ecma_regex`` exempts degree <= 3 under a small maxLength.

Over-flagged: ``(ab|ac)*`` (a shared first character, never a whole match); ``(a|b?)*`` (a
body that can be empty); ``(\\d+,?){3}`` (only polynomial). Missed: bounded repetitions in a row
(``[a-z]{0,100}`` five times: each range is under ``WIDE``, the product is not); other engine quirks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.pattern_parse import (
    ANY, Alt, Chars, Node, Ranges, Repeat, Seq, Unsupported, Zero, overlap, parse, to_ranges,
)

_STEP_BUDGET = 200_000  # the walk's own bound: a pattern it cannot check in this many steps is refused


# -- the walk ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Open:
    """A variable repetition not yet closed off, with the mandatory characters seen since it."""

    rep: Repeat | Alt | None  # None: the implicit start of an unanchored search
    chars: Ranges
    shields: tuple[Ranges, ...] = ()
    degree: int = 1


_START = _Open(None, ANY)


@dataclass(frozen=True)
class _Meeting:
    early: _Open
    late: Repeat | Alt
    can_fail_after: bool


class _Walk:
    """Walks parts of the pattern in order, recording where repetitions meet (module docstring)."""

    def __init__(self, budget: list[int]) -> None:
        self.budget = budget
        self.meetings: list[_Meeting] = []
        self.shared_starts: list[tuple[Node, Node]] = []  # alternatives that can start alike

    def walk(self, node: Node, open_: tuple[_Open, ...], can_fail_after: bool) -> tuple[_Open, ...]:
        self.budget[0] -= 1 + len(open_)
        if self.budget[0] < 0:
            raise Unsupported("too complex")
        if isinstance(node, Chars):
            return tuple(_shielded(e, node.last) for e in open_ if overlap(node.first, e.chars))
        if isinstance(node, Zero):
            if node.body is not None:
                self.walk(node.body, open_, False)
            return () if node.kind == "^" else open_  # before ^ only the empty string was matched
        if isinstance(node, Seq):
            rest_can_fail = [can_fail_after] * len(node.items)
            for k in range(len(node.items) - 2, -1, -1):
                rest_can_fail[k] = rest_can_fail[k + 1] or not node.items[k + 1].trivial
            for item, can_fail in zip(node.items, rest_can_fail):
                open_ = self.walk(item, open_, can_fail)
            return open_
        if isinstance(node, Alt):
            if (pair := _shared_start(node.options)) is not None:
                self.shared_starts.append(pair)
            after = _union(self.walk(o, open_, can_fail_after) for o in node.options)
            if node.nullable:  # (x|) is x?: a variable part, like a repetition
                self.meet(node, open_, can_fail_after)
                after += (_Open(node, node.chars),)
            return after
        assert isinstance(node, Repeat)
        return self.repeat(node, open_, can_fail_after)

    def repeat(self, node: Repeat, open_: tuple[_Open, ...], can_fail_after: bool) -> tuple[_Open, ...]:
        if node.hi == 0:
            return open_
        degree = self.meet(node, open_, can_fail_after) if node.variable else 1
        body_can_fail = can_fail_after or node.lo >= 2
        times = min(node.hi or 2, 2)  # twice at most: enough to see one iteration meet the next
        states = [open_] if node.lo == 0 else []
        current = open_
        for k in range(1, times + 1):
            current = self.walk(node.body, current, body_can_fail)
            if k >= min(node.lo, times):
                states.append(current)
        after = _union(states)
        if node.variable:
            shields = () if node.body.nullable else (node.last,)
            after += (_Open(node, node.chars, shields, degree if node.unbounded else 1),)
        return after

    def meet(self, node: Repeat | Alt, open_: tuple[_Open, ...], can_fail_after: bool) -> int:
        """Record the open repetitions ``node`` meets; its degree (the longest chain of unbounded ones)."""
        degree = 1
        for e in open_:
            if _meets(e, node):
                self.meetings.append(_Meeting(e, node, can_fail_after))
                if e.rep is None or e.rep.unbounded:
                    degree = max(degree, e.degree + 1)
        return degree


def _shared_start(options: tuple[Node, ...]) -> tuple[Node, Node] | None:
    """Two of ``options`` that can start with the same character, or None.

    One sweep over every option's first-character ranges in order of their start, not every
    pair compared: a wide alternation (a thousand keywords) would cost quadratic time at load.
    A range overlaps an earlier one of another option exactly when it starts at or before the
    furthest end reached so far by another option: the furthest end of all (``best``) or,
    when that is its own option's, the furthest of the other options (``other``).
    """
    spans = sorted((lo, hi, i) for i, option in enumerate(options) for lo, hi in option.first)
    best: tuple[int, int] | None = None  # (end, option) reaching furthest so far
    other: tuple[int, int] | None = None  # the same among the options other than best's
    for lo, hi, i in spans:
        for end, j in filter(None, (best, other)):
            if j != i and lo <= end:
                a, b = sorted((i, j))
                return options[a], options[b]
        if best is None or hi > best[0]:  # else hi <= best's end, so best is this option's (or it returned)
            if best is not None and best[1] != i:
                other = best
            best = (hi, i)
    return None


_MAX_SHIELDS = 8  # dropping a shield only makes the check stricter


def _meets(early: _Open, late: Repeat | Alt) -> bool:
    """``late`` can take over characters ``early`` matched: no shield keeps their runs apart."""
    return overlap(late.first, early.chars) and all(overlap(s, late.chars) for s in early.shields)


def _shielded(e: _Open, ranges: Ranges) -> _Open:
    shields = tuple(dict.fromkeys(e.shields + (ranges,)))[-_MAX_SHIELDS:]
    return _Open(e.rep, e.chars, shields, e.degree)


def _union(groups) -> tuple[_Open, ...]:
    """The open repetitions after any of several paths, one entry each (a merged shield: one from each path)."""
    merged: dict[tuple, _Open] = {}
    for e in (e for g in groups for e in g):
        key = (id(e.rep), e.chars)
        if key not in merged:
            merged[key] = e
            continue
        old = merged[key]
        shields = tuple(dict.fromkeys(to_ranges(x + y) for x in old.shields for y in e.shields))[:_MAX_SHIELDS]
        merged[key] = _Open(e.rep, e.chars, shields, max(old.degree, e.degree))
    return tuple(merged.values())


def _repeats(node: Node):
    if isinstance(node, Repeat):
        yield node
    for child in getattr(node, "items", ()) or getattr(node, "options", ()):
        yield from _repeats(child)
    if getattr(node, "body", None) is not None:
        yield from _repeats(node.body)


# -- the verdict -------------------------------------------------------------------------


@dataclass(frozen=True)
class Risk:
    """Why a pattern can backtrack badly."""

    kind: Literal["exponential", "polynomial", "engine_bug", "unchecked"]
    """Only a polynomial risk may be let through (a short string); the others never (module docstring)."""
    reason: str
    """One line for the operator: the offending part and how to fix it."""
    degree: int = 0
    """For a polynomial risk, k in O(n^k)."""


def backtracking_risk(pattern: str) -> str | None:
    """None when ``pattern`` (an ECMA-262 pattern that compiles) is safe, else why it is not."""
    risk = assess(pattern)
    return None if risk is None else risk.reason


def assess(pattern: str) -> Risk | None:
    """The backtracking risk of ``pattern`` (one that compiles as ECMA-262), or None."""
    try:
        root = parse(pattern)
        budget = [_STEP_BUDGET]
        for loop in _repeats(root):
            if loop.loops:
                found = _loop_risk(loop, budget)
                if found is not None:
                    return found
        return _sequence_risk(root, budget)
    except (Unsupported, ValueError, IndexError, KeyError, RecursionError) as exc:
        return Risk("unchecked", f"the gateway cannot check it for catastrophic backtracking ({exc}); simplify it")


def _loop_risk(loop: Repeat, budget: list[int]) -> Risk | None:
    """The engine_bug and exponential rules for one repetition that can iterate more than once."""
    loop_q = _q(loop.text)
    for inner in _repeats(loop.body):
        if inner.hi != 0 and inner.body.nullable:
            return Risk("engine_bug", f"{loop_q} repeats {_q(inner.text)}, a quantifier over something that can"
                        " match the empty string: on some strings regress then loops until memory runs out and"
                        f" aborts the process; make the body of {_q(inner.text)} always consume a character")
    fix = "(exponential backtracking); make each iteration start or end with a mandatory character that"
    w = _Walk(budget)
    after_one = w.walk(loop.body, (), True)
    for a, b in w.shared_starts:
        return Risk("exponential", f"{loop_q} repeats alternatives {_q(a.text)} and {_q(b.text)} that can start"
                    " with the same character (exponential backtracking); make them start differently")
    for m in w.meetings:
        return Risk("exponential", f"{loop_q} repeats {_q(m.early.rep.text)} and {_q(m.late.text)}, which can match"
                    f" the same characters one after the other {fix} neither can match, or use one repetition")
    for e in after_one:
        # (a?)*: an empty iteration ends the loop. Not so when more than one iteration must run,
        # (a?){n}: each may be empty or not, 2^n ways to divide the same text
        own = e.rep is loop.body and loop.body.hi == 1 and loop.lo <= 1
        if not own and _meets(e, loop.body):
            return Risk("exponential", f"{loop_q} repeats {_q(e.rep.text)}, and the next iteration can start with a"
                        f" character it matches, so iterations can divide the same text in many ways {fix}"
                        f" {_q(e.rep.text)} cannot match, or use one repetition")
    w.meetings.clear()
    w.walk(loop.body, after_one, True)
    for m in w.meetings:
        if not (m.early.rep is m.late and m.late is loop.body):
            return Risk("exponential", f"{loop_q} repeats {_q(m.late.text)}, which can match the same characters as"
                        f" {_q(m.early.rep.text)} of the iteration before {fix} neither can match")
    return None


def _q(text: str) -> str:
    """A part of the pattern as the operator wrote it (repr only when it holds unprintable characters)."""
    return f"'{text}'" if text.isprintable() and "'" not in text else repr(text)


def _sequence_risk(root: Node, budget: list[int]) -> Risk | None:
    w = _Walk(budget)
    w.walk(root, (_START,), False)
    worst: _Meeting | None = None
    for m in w.meetings:
        if m.can_fail_after and m.late.unbounded and (m.early.rep is None or m.early.rep.unbounded):
            if worst is None or m.early.degree > worst.early.degree:
                worst = m
    if worst is None:
        return None
    degree = worst.early.degree + 1
    cost = f"a non-matching string of n characters takes O(n^{degree}) steps (polynomial backtracking)"
    if worst.early.rep is None:
        return Risk("polynomial", degree=degree, reason=(
            f"the pattern is not anchored with '^', so it is tried from every position, and {_q(worst.late.text)} can"
            f" run over the same characters from each: {cost}; anchor it with '^', or put a mandatory character"
            f" {_q(worst.late.text)} cannot match before it"))
    return Risk("polynomial", degree=degree, reason=(
        f"{_q(worst.early.rep.text)} and {_q(worst.late.text)} can match the same characters with no mandatory"
        f" character between them that one of them cannot match: {cost}; merge them into one repetition or"
        " separate them with such a character"))
