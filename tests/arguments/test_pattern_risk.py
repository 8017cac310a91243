"""A pattern that can backtrack catastrophically does not load (``gateway.pattern_risk``).

regress has no step limit and holds the GIL, and the agent writes the strings a pattern runs
on: ``^(a+)+$`` against 40 characters would freeze a worker for hours. So the check is static
and at load: a table of shapes it must refuse and must let through, the refusal as a config
error, the maxLength exemption for polynomial patterns, and a property test that what it lets
through runs fast on adversarial strings (in a subprocess, so a miss fails instead of hanging).
"""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.arguments import SchemaValidator
from gateway.config import ConfigError, load_config
from gateway.ecma_regex import PatternError, compile_pattern, schema_problems
from gateway.pattern_parse import overlap, to_ranges
from gateway.pattern_risk import _shared_start, assess, backtracking_risk
from tests._timing import cpu_seconds, least_times
from tests.conftest import JsonLineWorker, config_file_with_tool


# (pattern, the rule it breaks)
FLAGGED = [
    ("(a+)+", "exponential"),
    ("^(a+)+$", "exponential"),
    ("(a*)*", "exponential"),
    ("(\\w+\\s?)*", "exponential"),
    ("(a+b?)+", "exponential"),
    ("^([a-zA-Z0-9_.-])+@(([a-zA-Z0-9-])+\\.)+([a-zA-Z0-9]{2,4})+$", "exponential"),
    ("^(a{1,2})+$", "exponential"),  # Fibonacci many ways: a small inner bound is not safe
    ("^(a{2}a?)*$", "exponential"),
    ("^(a?b?)*$", "exponential"),
    ("^(a+ba*)*$", "exponential"),  # the a* ending one iteration meets the a+ starting the next
    ("^(\\d+\\d+x)*$", "exponential"),
    ("(a|a)*", "exponential"),
    ("(a|ab)*", "exponential"),
    ("(\\w|\\d)+", "exponential"),
    ("(a|ba+)*", "exponential"),
    ("(?:b(?:b|b)?){2}$", "exponential"),  # regress is quadratic on this fixed count
    ("^(?:[0-9]?){24}$", "exponential"),  # every iteration must run, each empty or not: 2^24 ways
    ("^(a?){20}$", "exponential"),
    ("^(a?){2,}b", "exponential"),
    ("(?:(?:1|)?){2}$", "engine_bug"),  # regress loops until memory runs out
    ("(?:x(?:1|\\b)?)*$", "engine_bug"),
    ("\\d+\\d+", "polynomial"),
    (".*.*=.*", "polynomial"),
    ("^[a-z]+[a-z0-9]*$", "polynomial"),
    ("\\s*\\s*$", "polynomial"),
    ("^\\d+\\d\\d+$", "polynomial"),  # a mandatory character both can match keeps them meeting
    ("^a+b?a+$", "polynomial"),  # an optional separator does not part them
    ("\\w+$", "polynomial"),  # unanchored: tried from every position
    ("[a-z]+@", "polynomial"),
    ("^(ab)*(ab)*$", "polynomial"),
    ("^(\\d+)\\1$", "polynomial"),  # a backreference may be any text
    ("^\\d+(?=\\d+x)", "polynomial"),  # a lookahead's body is checked where it stands
    ("(?i:a)", "unchecked"),  # syntax the check does not know is refused, not passed
]

NOT_FLAGGED = [
    "^[a-z]+(\\.[a-z]+)*$",
    "^([a-z0-9]+,)*[a-z0-9]+$",
    "^(\\d{1,3}\\.){3}\\d{1,3}$",
    "(a|b)*",
    "(cat|dog)+",
    "^[a-z][a-z0-9_]*$",
    "^\\d+\\.\\d+$",
    "^[A-Z0-9-]{3,32}$",
    "^[A-Za-z0-9_.-]{1,100}$",
    "^T-\\d{3}$",
    "[0-9]+",  # unanchored, but nothing after it can fail
    ".*.*",
    "a\\d+x",  # the mandatory 'a' starts every run of \d+ afresh
    "^(a?)*$",  # an empty iteration ends the loop
    "^\\d+(x\\d+)*$",
    "^(x\\d+)*x+$",
    "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]{2,}$",
    "^([0-9a-f]{1,4}:){1,7}[0-9a-f]{1,4}$",
    "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$",
    "^\\+?[0-9]{7,15}$",
    "^\\d{4}-\\d{2}-\\d{2}$",
    "^[a-z]+(-[a-z]+)*$",
    "^\\d+-?[a-z]+\\d$",
    "^(?<year>\\d{4})$",
    "\\bfoo\\b",
    "^\\p{Lu}+$",
    "^\\uD83D\\uDE00+$",
    "^[a-z]{1,10}[a-z0-9]{0,20}$",  # bounded: at most 10 x 21 ways
]


@pytest.mark.parametrize("pattern, kind", FLAGGED, ids=[p for p, _ in FLAGGED])
def test_a_risky_pattern_is_flagged(pattern, kind):
    compile_pattern(pattern)  # each is ECMA-262: the risk is the only thing wrong with it
    risk = assess(pattern)
    assert risk is not None and risk.kind == kind
    assert backtracking_risk(pattern) == risk.reason and "\n" not in risk.reason


@pytest.mark.parametrize("pattern", NOT_FLAGGED)
def test_a_safe_pattern_is_not_flagged(pattern):
    compile_pattern(pattern)
    assert backtracking_risk(pattern) is None


@pytest.mark.parametrize("pattern, part, degree", [
    ("^[a-z]+[a-z0-9]*$", "'[a-z0-9]*'", 2),
    (".*.*=.*", "'.*'", 3),
    ("^\\d*\\d*\\d*\\d*x", "'\\d*'", 4),
])
def test_a_polynomial_risk_names_the_repetitions_and_its_degree(pattern, part, degree):
    risk = assess(pattern)
    assert risk.kind == "polynomial" and risk.degree == degree
    assert part in risk.reason and f"O(n^{degree})" in risk.reason


def test_the_reason_names_the_offending_part_and_a_fix():
    reason = backtracking_risk("^[a-z]+@(\\w+\\s?)*$")
    assert "'(\\w+\\s?)*' repeats '\\w+'" in reason
    assert "mandatory character" in reason and "or use one repetition" in reason


def test_a_tool_with_an_exponential_pattern_does_not_load(tmp_path):
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^(a+)+$", "maxLength": 10}}}
    with pytest.raises(ConfigError) as caught:
        load_config(config_file_with_tool(tmp_path, schema))
    message = str(caught.value)
    assert "'lookup_order'" in message
    assert "pattern '^(a+)+$' at /properties/id/pattern can backtrack catastrophically" in message
    assert "'(a+)+' repeats '(a+)'" in message and "exponential backtracking" in message


def test_a_risky_pattern_property_key_or_nested_pattern_is_refused():
    for schema, where in [
        ({"type": "object", "patternProperties": {"^(x-\\w+)+$": {}}}, "patternProperties key '^(x-\\\\w+)+$' at "),
        ({"type": "object", "$defs": {"d": {"items": {"pattern": "(a|ab)*c"}}}}, "at /$defs/d/items/pattern"),
        ({"type": "object", "patternProperties": {"^[a-z]+\\d+\\w*$": {}}}, "patternProperties key"),  # no exemption
    ]:
        problems = schema_problems(schema)
        assert len(problems) == 1 and where in problems[0], problems
        with pytest.raises(ValueError, match="can backtrack catastrophically"):
            SchemaValidator.compile(schema)


POLYNOMIAL = "^[a-z]+[a-z0-9]*$"


@pytest.mark.parametrize("max_length, loads", [(None, False), (257, False), (256, True), (20, True)])
def test_a_polynomial_pattern_loads_only_under_a_short_max_length(max_length, loads):
    string = {"type": "string", "pattern": POLYNOMIAL} | ({} if max_length is None else {"maxLength": max_length})
    problems = schema_problems({"type": "object", "properties": {"s": string}})
    assert (problems == []) is loads
    if not loads:
        assert "or give the string a maxLength of at most 256" in problems[0]


def test_an_exponential_pattern_is_refused_even_under_a_short_max_length():
    assert schema_problems({"type": "string", "pattern": "^(a|a)*$", "maxLength": 8})


def test_a_long_string_is_refused_by_max_length_without_running_the_pattern():
    v = SchemaValidator.compile({"type": "object", "properties": {"s": {"type": "string", "pattern": POLYNOMIAL,
                                                                     "maxLength": 256}}})
    assert v.errors({"s": "a" * 200}) == []
    assert [e.path for e in v.errors({"s": "a" * 200 + "!"})] == ["/s"]
    started = time.perf_counter()
    assert not v.valid({"s": "a" * 10_000 + "!"})
    errors = v.errors({"s": "a" * 10_000 + "!"})  # jsonschema: every keyword, but not the pattern
    assert time.perf_counter() - started < 1.0  # the pattern alone would take seconds
    assert len(errors) == 1 and "is too long" in errors[0].message


# -- what the check lets through runs fast --------------------------------------------

_WORKER = """
import json, sys, time, regress
for line in sys.stdin:
    job = json.loads(line)
    regex, worst = regress.Regex(job["pattern"], "u"), 0.0
    for text in job["inputs"]:
        started = time.perf_counter()
        regex.find(text)
        worst = max(worst, time.perf_counter() - started)
    print(json.dumps(worst), flush=True)
"""

_LEAVES = ["a", "b", "1", " ", "[ab]", "[a1]", "[^a]", "\\d", "\\w", "\\s", ".", "\\b"]
_QUANTIFIERS = ["*", "+", "?", "{1,3}", "{2,}", "{0,2}", "{2}", "*?"]


def _quantified(inner: str, quantifier: str) -> str:
    if inner == "\\b":  # an assertion takes no quantifier
        return inner
    return (inner if inner in _LEAVES else f"(?:{inner})") + quantifier


_PARTS = st.recursive(
    st.sampled_from(_LEAVES),
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map("".join),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
        st.tuples(inner, st.sampled_from(_QUANTIFIERS)).map(lambda t: _quantified(*t)),
    ),
    max_leaves=10,
)
_PATTERNS = st.tuples(st.booleans(), _PARTS, st.booleans()).map(lambda t: "^" * t[0] + t[1] + "$" * t[2])


def _adversarial(pattern: str) -> list[str]:
    """Runs of the pattern's own characters (one, or two alternating) ending in a character that breaks them."""
    chars = sorted({c for c in pattern if c in "ab1 "}) or ["a"]
    runs = [c * 2000 for c in chars] + [(x + y) * 1000 for x, y in itertools.combinations(chars, 2)]
    return [run + tail for run in runs for tail in "!\n"]


@pytest.fixture(scope="module")
def worker():
    w = JsonLineWorker(_WORKER)
    yield w
    w.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pattern=_PATTERNS)
def test_a_pattern_let_through_runs_fast_on_adversarial_strings(worker, pattern):
    try:
        compile_pattern(pattern)
    except PatternError:
        return
    if backtracking_risk(pattern) is not None:
        return
    worst = worker.ask({"pattern": pattern, "inputs": _adversarial(pattern)}, timeout=5.0)  # None: hung or aborted
    assert worst is not None, f"{pattern!r} was let through but hung or crashed regress on 2,000 characters"
    assert worst < 0.5, f"{pattern!r} was let through but took {worst:.2f} s on 2,000 characters"


_code_points = st.integers(0, 40)
_ranges = st.lists(st.tuples(_code_points, _code_points).map(sorted), max_size=3).map(
    lambda pairs: to_ranges(tuple(p) for p in pairs))


class _Option:
    """What ``_shared_start`` reads of an alternative: the characters it can start with."""

    def __init__(self, first):
        self.first = first


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(st.lists(_ranges, max_size=6))
def test_the_sweep_finds_a_shared_start_exactly_when_some_pair_has_one(firsts):
    options = tuple(_Option(f) for f in firsts)
    pair = _shared_start(options)
    any_pair = any(overlap(a.first, b.first) for a, b in itertools.combinations(options, 2))
    assert (pair is not None) == any_pair
    if pair is not None:
        a, b = pair
        assert a is not b and overlap(a.first, b.first)
        assert options.index(a) < options.index(b)  # reported in the order written


def _wide_alternation(alternatives: int) -> str:
    return "^(" + "|".join(chr(0x4E00 + i) + "a" for i in range(alternatives)) + ")+$"  # no two start alike


WIDTHS = [125, 250, 500, 1000, 2000]
LIMIT_EXPONENT = 1.35
"""Fitted over 16x the alternatives: about 0.9 here, quadratic time 2. It fails a time of n + c·n² (n the
widest) from c = 2, as the ratio limit of 8 between 500 and 2,000 did."""


def test_a_wide_alternation_is_checked_in_about_linear_time():
    """A thousand keywords in a repeated group: comparing every pair of alternatives took 0.7 s
    for 1,000 and grew 16x for 4x the alternatives. CPU time, the least of interleaved rounds, and a
    fit over five widths (``tests._timing``): a best-of-3 wall-clock ratio of two widths counted the
    time the test was preempted on a loaded machine."""
    patterns = {n: _wide_alternation(n) for n in WIDTHS}
    assert all(assess(p) is None for p in patterns.values())
    timings = least_times(lambda n: cpu_seconds(assess, patterns[n]), WIDTHS,
                          lambda t: t.exponent < LIMIT_EXPONENT, budget=4.0, give_up=2.0)
    assert timings.seconds[-1] < 2.0, f"over 2 s for {WIDTHS[-1]:,} alternatives: {timings}"
    assert timings.exponent < LIMIT_EXPONENT, f"super-linear in the alternatives: {timings}"
