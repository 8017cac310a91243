"""ECMA-262 patterns (Unicode mode) parsed into the parts ``pattern_risk`` walks.

``parse(pattern)`` gives the root ``Node``; syntax it does not know raises ``Unsupported``.
Each part has the characters it can consume, start and end with, as ``Ranges``: literals,
escapes, classes and ``.`` exactly; ``\\p{…}`` as any character; a backreference as ``[^]*``.
Assertions and lookarounds (``Zero``) consume nothing; a lookaround keeps its body. A
``Repeat`` is *variable* when it can take different counts and *unbounded* when it has no
maximum or more than ``WIDE`` possible counts; an ``Alt`` that can match the empty string is
a variable part like ``x?``.
"""

from __future__ import annotations

import re

Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive code point ranges

WIDE = 100
"""A repetition with more possible counts than this is treated as unbounded."""

ANY: Ranges = ((0, 0x10FFFF),)


def to_ranges(pairs) -> Ranges:
    """``Ranges`` covering the inclusive ``(lo, hi)`` code point pairs given, in any order."""
    merged: list[list[int]] = []
    for lo, hi in sorted(pairs):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def _negate(rs: Ranges) -> Ranges:
    bounds = [-1] + [b for pair in rs for b in pair] + [0x110000]  # the gaps lie between hi and the next lo
    return tuple((bounds[k] + 1, bounds[k + 1] - 1) for k in range(0, len(bounds), 2) if bounds[k] + 1 < bounds[k + 1])


def overlap(a: Ranges, b: Ranges) -> bool:
    """Some code point is in both."""
    return any(lo <= y and x <= hi for lo, hi in a for x, y in b)


_DIGIT: Ranges = ((48, 57),)
_WORD = to_ranges([(48, 57), (65, 90), (95, 95), (97, 122)])
_SPACE = to_ranges([(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                  (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
_DOT = _negate(to_ranges([(10, 10), (13, 13), (0x2028, 0x2029)]))
_CLASSES = {"d": _DIGIT, "D": _negate(_DIGIT), "w": _WORD, "W": _negate(_WORD), "s": _SPACE, "S": _negate(_SPACE)}
_CONTROLS = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13, "0": 0, "b": 8}  # \b: backspace, in a class


class Node:
    """A part of the pattern with what it can consume, start and end with, and whether it can fail."""

    text = ""
    nullable = True  # can match the empty string
    trivial = True  # matches the empty string wherever it is tried: nothing in it can fail
    chars: Ranges = ()
    first: Ranges = ()
    last: Ranges = ()


class Chars(Node):
    nullable = trivial = False

    def __init__(self, ranges: Ranges) -> None:
        self.chars = self.first = self.last = ranges


class Zero(Node):
    """An assertion (``^``, ``$``, ``\\b``) or a lookaround with its ``body``."""

    trivial = False

    def __init__(self, kind: str, body: Node | None = None) -> None:
        self.kind, self.body = kind, body


class Seq(Node):
    def __init__(self, items: list[Node]) -> None:
        self.items = items
        self.nullable, self.trivial = all(i.nullable for i in items), all(i.trivial for i in items)
        self.chars = to_ranges(r for i in items for r in i.chars)
        self.first, self.last = _edge(items, "first"), _edge(items[::-1], "last")


class Alt(Node):
    hi, unbounded = 1, False  # when it can match the empty string, it is a variable part like x?

    def __init__(self, options: list[Node]) -> None:
        self.options = options
        self.nullable, self.trivial = any(o.nullable for o in options), any(o.trivial for o in options)
        self.chars, self.first, self.last = (to_ranges(r for o in options for r in getattr(o, side))
                                             for side in ("chars", "first", "last"))


class Repeat(Node):
    def __init__(self, body: Node, lo: int, hi: int | None) -> None:
        self.body, self.lo, self.hi = body, lo, hi
        self.nullable = lo == 0 or body.nullable or hi == 0
        self.trivial = lo == 0 or body.trivial or hi == 0
        if hi != 0:
            self.chars, self.first, self.last = body.chars, body.first, body.last
        self.variable = hi is None or hi > lo
        self.loops = hi is None or hi >= 2
        self.unbounded = hi is None or hi - lo > WIDE


def _edge(items: list[Node], side: str) -> Ranges:
    """The characters a sequence can start (or, reversed, end) with."""
    out: list[tuple[int, int]] = []
    for item in items:
        out += getattr(item, side)
        if not item.nullable:
            break
    return to_ranges(out)


class Unsupported(Exception):
    """Syntax the parser does not know: ``pattern_risk`` then refuses the pattern as unchecked."""


_QUANTIFIER = re.compile(r"([*+?])|\{(\d+)(,(\d*))?\}")
_GROUP = re.compile(r"\?(?:(:|=|!|<=|<!)|<[^>]*>)")
_BACKREF = re.compile(r"k<[^>]*>|[1-9]\d*")
_HEX = re.compile(r"x([0-9a-fA-F]{2})|u\{([0-9a-fA-F]+)\}|u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"
                  r"|u([0-9a-fA-F]{4})|c([A-Za-z])|[pP]\{[^}]*\}")


class _Parser:
    """ECMA-262 pattern syntax (Unicode mode) into ``Node`` parts; anything else is ``Unsupported``."""

    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def parse(self) -> Node:
        node = self.alternation()
        if self.i != len(self.s):
            raise Unsupported(f"unexpected {self.s[self.i]!r}")
        return node

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self, expected: str = "") -> str:
        c = self.peek()
        if not c or (expected and c != expected):
            raise Unsupported(f"expected {expected or 'more'}")
        self.i += 1
        return c

    def match(self, regex: re.Pattern) -> re.Match | None:
        m = regex.match(self.s, self.i)
        if m:
            self.i = m.end()
        return m

    def spanned(self, node: Node, start: int) -> Node:
        node.text = self.s[start:self.i]
        return node

    def alternation(self) -> Node:
        start, options = self.i, [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else self.spanned(Alt(options), start)

    def sequence(self) -> Node:
        start, items = self.i, []
        while self.peek() not in ("", "|", ")"):
            atom_start, atom = self.i, self.atom()
            m = self.match(_QUANTIFIER)
            if m:
                if m[1]:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[m[1]]
                else:
                    lo = int(m[2])
                    hi = lo if m[3] is None else int(m[4]) if m[4] else None
                self.i += self.peek() == "?"  # lazy: the same paths, in another order
                atom = self.spanned(Repeat(atom, lo, hi), atom_start)
            items.append(atom)
        return items[0] if len(items) == 1 else self.spanned(Seq(items), start)

    def atom(self) -> Node:
        start, c = self.i, self.take()
        if c == "(":
            m = self.match(_GROUP)
            if m is None and self.peek() == "?":
                raise Unsupported(f"group syntax {self.s[start:start + 4]!r}")
            node = self.alternation()
            self.take(")")
            if m is not None and m[1] not in (None, ":"):
                node = Zero("look", node)
        elif c == "[":
            node = Chars(self.char_class())
        elif c in ("^", "$"):
            node = Zero(c)
        elif c == "\\" and self.peek() in ("b", "B"):
            node = Zero("\\" + self.take())
        elif c == "\\" and self.match(_BACKREF):
            node = Repeat(Chars(ANY), 0, None)  # a backreference: any text of any length
        elif c == "\\":
            node = Chars(self.escape(in_class=False))
        else:
            node = Chars(_DOT if c == "." else ((ord(c), ord(c)),))
        return self.spanned(node, start)

    def escape(self, in_class: bool) -> Ranges:
        m = self.match(_HEX)
        if m is None:
            c = self.take()
            if c in _CLASSES:
                return _CLASSES[c]
            code = _CONTROLS[c] if c in _CONTROLS and (c != "b" or in_class) else ord(c)  # else \. \- \/ ...
        elif m[0][0] in "pP":
            return ANY
        elif m[3]:  # a surrogate pair written as two \u escapes: one code point
            code = 0x10000 + ((int(m[3], 16) - 0xD800) << 10) + (int(m[4], 16) - 0xDC00)
        elif m[6]:
            code = ord(m[6]) % 32
        else:
            code = int(m[1] or m[2] or m[5], 16)
        return ((code, code),)

    def char_class(self) -> Ranges:
        negated = self.peek() == "^"
        self.i += negated
        parts: list[tuple[int, int]] = []
        while self.peek() != "]":
            lo = self.class_atom()
            if self.peek() == "-" and self.s[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                parts.append((lo[0][0], hi[0][1]) if len(lo) == len(hi) == 1 else (0, 0x10FFFF))
            else:
                parts += lo
        self.take("]")
        return _negate(to_ranges(parts)) if negated else to_ranges(parts)

    def class_atom(self) -> Ranges:
        c = self.take()
        return self.escape(in_class=True) if c == "\\" else ((ord(c), ord(c)),)


def parse(pattern: str) -> Node:
    """The parts of ``pattern``; raises ``Unsupported`` on syntax the parser does not know."""
    return _Parser(pattern).parse()
