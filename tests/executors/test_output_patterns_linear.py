"""The regular expressions run over tool output take linear time, at the largest text the gateway feeds them.

Tool output is attacker-influenced (a fetched web page, an upstream that echoes what it was sent), and
Python's ``re`` has no step limit and holds the GIL: a pattern that backtracks super-linearly stalls a
worker. So every built-in pattern (``scrub.DEFAULT_PATTERNS``, the exact-secret alternation, the cut at an
executor's cap, ``injection.PATTERNS``) is timed on inputs aimed at its repetitions — long runs of what its
quantifiers accept, repeated starts, a last character that makes the match fail — and on text drawn
from its own alphabet (hypothesis). Each is timed at five sizes, from an eighth of the full size to
twice it, and the growth exponent fitted over them (``tests._timing``): about 1 for linear time, 2 for
quadratic. CPU time in a subprocess, so a regression fails at a deadline instead of hanging the suite;
the least of interleaved rounds of the sizes, more while the growth looks super-linear, so a loaded
machine does not fail a linear pattern.

A fit over five sizes, not the ratio of two, because load on a shared host can inflate the longest runs
alone for a while (a run of 30 ms more often spans a stolen slice than one of 2 ms): a 2x step at the
full size, seen in CI in all six rounds, took the ratio of a quarter to the full size from 4 to 8
(limit 6); a 2x step at the largest size moves the fitted exponent by 0.2 (limit 1.3). No timing tells
such a step from a quadratic term costing as much at the largest size timed, so the sizes reach twice
the full size: a time of n + c·n² (n the full size) is failed from c ≈ 0.77, where the ratio of a
quarter to the full size failed it from c = 0.8. The full size must also take under ``MOST_SECONDS``.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.executors.options import DEFAULT_MAX_BYTES
from gateway.injection import MAX_SCAN_CHARS
from gateway.injection import PATTERNS as INJECTION_PATTERNS
from gateway.scrub import DEFAULT_PATTERNS, PATTERN_MARGIN_BYTES
from tests._timing import Timings, least_times
from tests.conftest import JsonLineWorker

ROOT = Path(__file__).resolve().parents[2]

SCRUB_CHARS = DEFAULT_MAX_BYTES + PATTERN_MARGIN_BYTES  # an http body's or a subprocess output's default cap
"""The longest text scrubbed or cut by default: an executor's cap plus the margin read past it."""

LIMIT_EXPONENT = 1.3
"""The most growth fitted over 16x the text: every pattern here fits 0.93-1.02 on a quiet machine,
quadratic time 2."""
FLOOR_SECONDS = 0.01
"""Below this on the largest size timed the growth is not judged (the smallest then take microseconds)."""
SCALES = (1 / 8, 1 / 4, 1 / 2, 1, 2)
"""The sizes timed, as multiples of the full size (twice it: see the module docstring)."""
FULL = SCALES.index(1)
MOST_SECONDS = 3.0
"""The most one pass over the full-size text may take (the slowest linear pattern takes under 1 s)."""
DEADLINE_SECONDS = 30.0
"""A job not done by then has hung: the worker is killed and the test fails."""

INJECTION_NAMES = ("instruction_override", "role_change", "role_header", "chat_template", "tool_call_syntax")
PATTERNS = {p.name: p.regex for p in DEFAULT_PATTERNS} | dict(zip(INJECTION_NAMES, INJECTION_PATTERNS))
SIZES = {p.name: SCRUB_CHARS for p in DEFAULT_PATTERNS} | dict.fromkeys(INJECTION_NAMES, MAX_SCAN_CHARS)

TOKEN = secrets.token_urlsafe(30)
SECRETS = ["Bearer " + TOKEN, TOKEN, "p@ss w0rd/with+odd&chars"]
"""A token as injected in a header and raw (a tool that echoes the header knows both), and a value
whose encoded forms differ from it."""


# (pattern, head, unit repeated to the size, tail): what each input aims at
ADVERSARIAL = [
    ("pem_private_key", "-----BEGIN ", "A", ""),  # the header's [A-Z0-9 ]* over a run with no PRIVATE KEY
    ("pem_private_key", "-----BEGIN ", "PRIVATE KEY ", ""),  # ... over near misses of what follows it
    ("pem_private_key", "-----BEGIN PRIVATE KEY-----", "-----END A", ""),  # the lazy body tries END everywhere
    ("pem_private_key", "", "-----BEGIN ", ""),  # a start at every header
    ("aws_access_key_id", "", "-AKIA" + "0" * 15, ""),  # starts one character short
    ("aws_secret_access_key", "aws_secret_access_key", " ", ""),  # \s* with no separator after
    ("aws_secret_access_key", "", "aws_secret_access_key= ", ""),
    ("aws_secret_access_key", "", "aws_secret_access_key:" + "a" * 39 + " ", ""),  # a key one short
    ("github_token", "", "-ghp_" + "a" * 300, ""),  # {36,255} gives back up to the minimum
    ("github_token", "ghp_", "a", "_"),
    ("github_token", "", "github_pat_", ""),
    ("slack_token", "", "xoxb-", ""),  # a start inside the run of the one before
    ("slack_token", "xoxb-", "-", ""),  # [A-Za-z0-9-]{10,} with no \b at its end
    ("slack_token", "", "xoxb--", ""),
    ("jwt", "", "eyJ-", ""),  # \beyJ after each -, each rescanning the run for a . (quadratic before)
    ("jwt", "", "eyJaaaaaaaa.eyJ-", ""),
    ("jwt", "", "eyJaaaaaaaa.eyJaaaaaaaa.-", ""),  # the last segment's \b never holds
    ("jwt", "eyJ", "a", ""),
    ("jwt", "", "-", ""),
    ("bearer_token", "", "bearer ", ""),
    ("bearer_token", "bearer ", "a", ""),
    ("basic_auth", "", "basic ", ""),
    ("basic_auth", "basic ", "a", "="),
    ("url_password", "", "://", ""),
    ("url_password", "://", "a", ""),  # no : after the user
    ("url_password", "://a:", "b", ""),  # no @ after the password
    ("url_password", "", "://a:", ""),
    ("instruction_override", "", "ignore all ", ""),  # the most work per character found: two lazy gaps
    ("role_change", "", "new instructions ", ""),
    ("role_change", "new instructions", " ", ""),
    ("role_change", "", "act as an ", ""),
    ("role_header", "", "\n", ""),  # a start at every line, ^\s* running over the next ones (quadratic before)
    ("role_header", "", " \n", ""),
    ("role_header", "system", " ", ""),  # two \s* sharing the spaces before a missing : (quadratic before)
    ("role_header", "", "\nsystem ", ""),
    ("role_header", "#", "\n", ""),
    ("role_header", "", "#", ""),
    ("chat_template", "", "<|", ""),
    ("chat_template", "", "[/INS", ""),
    ("tool_call_syntax", "", '"tool_calls" ', ""),
    ("tool_call_syntax", '"tool_calls"', " ", ""),
    ("tool_call_syntax", "", "<function", ""),
]

_NEAR_MISSES = "".join(form[:-1] + "\0" for form in sorted(SECRETS))

# (case, what runs, unit) for the scrubber with SECRETS, at the scrubbed size
SCRUBBER = [
    ("near_misses", "text", _NEAR_MISSES),  # each alternative of the exact-secret alternation nearly matches
    ("near_misses", "cut", _NEAR_MISSES),
    ("overlapping_secrets", "cut", "Bearer " + TOKEN),  # secret and bearer_token match in turn, each a step back
]


_WORKER = r"""
import json, re, sys, time

def text_of(job, size):
    head, unit, tail = job["head"], job["unit"], job["tail"]
    body = size - len(head) - len(tail)
    return head + (unit * (body // len(unit) + 1))[:body] + tail

def runner(job):
    if job["kind"] == "regex":
        regex = re.compile(job["pattern"], job["flags"])
        return lambda text: sum(1 for _ in regex.finditer(text))
    from gateway.scrub import Scrubber
    scrubber = Scrubber(job["secrets"])
    if job["kind"] == "text":
        return scrubber.text
    return lambda text: scrubber.cut(text, len(text) - job["margin"])

job = run = texts = None
for line in sys.stdin:  # {"job": ..., "size": n}: the CPU time of one run on the job's text of n characters
    ask = json.loads(line)
    if ask["job"] != job:
        job, texts = ask["job"], {}
        run = runner(job)
    if ask["size"] not in texts:
        texts[ask["size"]] = text_of(job, ask["size"])
    text = texts[ask["size"]]
    started = time.process_time()
    run(text)
    print(json.dumps(time.process_time() - started), flush=True)
"""


@pytest.fixture(scope="module")
def worker():
    w = JsonLineWorker(_WORKER, cwd=ROOT)
    yield w
    w.close()


def _regex_job(name: str, head: str, unit: str, tail: str) -> dict:
    regex = PATTERNS[name]
    return {"kind": "regex", "pattern": regex.pattern, "flags": regex.flags, "head": head, "unit": unit, "tail": tail}


def _sizes(size: int) -> list[int]:
    return [round(size * scale) for scale in SCALES]


def _assert_linear(worker: JsonLineWorker, job: dict, size: int, what: str, max_rounds: int = 60) -> None:
    def seconds(n: int) -> float:
        took = worker.ask({"job": job, "size": n}, DEADLINE_SECONDS)
        assert took is not None, f"{what}: not done in {DEADLINE_SECONDS:.0f} s on {n:,} characters"
        return took

    def linear(t: Timings) -> bool:
        return t.seconds[-1] < FLOOR_SECONDS or t.exponent < LIMIT_EXPONENT

    timings = least_times(seconds, _sizes(size), linear, min_rounds=2, max_rounds=max_rounds, budget=10.0,
                          give_up=2 * MOST_SECONDS)  # twice the full size may take twice as long
    assert timings.seconds[FULL] < MOST_SECONDS, f"{what}: over {MOST_SECONDS:.0f} s on the full size: {timings}"
    assert linear(timings), f"{what}: super-linear: {timings}"


def test_the_check_fails_a_quadratic_pattern_that_stays_within_its_time_limit(worker):
    # a*b on a run of a: each start runs to the end and backs off; ~0.07 s on 8K, far under MOST_SECONDS
    job = {"kind": "regex", "pattern": "a*b", "flags": 0, "head": "", "unit": "a", "tail": ""}
    with pytest.raises(AssertionError, match="super-linear"):
        _assert_linear(worker, job, 8 * 1024, "a*b on 'a'...", max_rounds=6)


def test_the_growth_limit_passes_a_2x_step_at_the_largest_sizes_and_fails_a_quadratic_term():
    sizes = _sizes(SCRUB_CHARS)
    linear = [n / SCRUB_CHARS for n in sizes]

    def exponent(seconds: list[float]) -> float:
        return Timings(sizes, seconds, 1).exponent

    assert exponent(linear[:-1] + [2 * linear[-1]]) < LIMIT_EXPONENT - 0.09  # the step that failed CI, at the top
    assert exponent([x + 0.8 * x * x for x in linear]) > LIMIT_EXPONENT  # what the two-size ratio failed
    assert exponent([x * x for x in linear]) > LIMIT_EXPONENT + 0.65


def test_every_built_in_pattern_has_adversarial_inputs():
    assert {name for name, *_ in ADVERSARIAL} == set(PATTERNS)
    assert len(INJECTION_PATTERNS) == len(INJECTION_NAMES)


@pytest.mark.parametrize("name, head, unit, tail", ADVERSARIAL,
                         ids=[f"{name}:{head[:12]!r}+{unit[:18]!r}*n+{tail!r}" for name, head, unit, tail in
                              ADVERSARIAL])
def test_a_pattern_takes_linear_time_on_input_aimed_at_its_repetitions(worker, name, head, unit, tail):
    _assert_linear(worker, _regex_job(name, head, unit, tail), SIZES[name], f"{name} on {head!r} + {unit!r}...")


@pytest.mark.parametrize("kind, unit", [(kind, unit) for _, kind, unit in SCRUBBER],
                         ids=[f"{kind}:{case}" for case, kind, _ in SCRUBBER])
def test_the_scrubber_takes_linear_time_with_secrets_known_to_the_tool(worker, kind, unit):
    job = {"kind": kind, "secrets": SECRETS, "margin": PATTERN_MARGIN_BYTES, "head": "", "unit": unit, "tail": ""}
    _assert_linear(worker, job, SCRUB_CHARS, f"Scrubber.{kind} on {unit[:40]!r}...")


# each pattern's own characters and words, and characters that break its runs
ALPHABETS = {
    "pem_private_key": ["-----BEGIN ", "-----END ", "PRIVATE KEY", "-----", "A", "0", " ", "-", "\n", "x"],
    "aws_access_key_id": ["AKIA", "ASIA", "A", "0", "-", " ", "_", "a"],
    "aws_secret_access_key": ["aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", " ", "\t", ":", "=", "'", '"',
                              "a", "/", "+", "-"],
    "github_token": ["ghp_", "gho_", "github_pat_", "a", "0", "_", "-", " "],
    "slack_token": ["xoxb-", "xoxp-", "a", "0", "-", "_", " "],
    "jwt": ["eyJ", "a", "0", "_", "-", ".", " ", "é"],
    "bearer_token": ["bearer ", "Bearer ", "a", ".", "~", "/", "=", "-", " ", ":"],
    "basic_auth": ["basic ", "a", "+", "/", "=", " ", "-"],
    "url_password": ["://", "a", ":", "@", "/", " ", "-"],
    "instruction_override": ["ignore", "forget", "all", "your", "previous", "instructions", "rules", " ", "-",
                             ".", "\n", "x"],
    "role_change": ["you are now", "new instruction", "new instructions", "act as ", "an ", "a ", "system", " ",
                    "\t", ":", "x"],
    "role_header": ["system", "assistant", "prompt", "#", " ", "\t", "\n", "\r", ":", "x"],
    "chat_template": ["<|", "|>", "im_start", "system", "[", "/", "INST", "]", "<<SYS>>", "<", ">", "x"],
    "tool_call_syntax": ["<", "/", "tool_call", "function", "_calls", "=", '"', "function_call", "tool_calls", " ",
                         ":", ">", "invoke", "x"],
}
ALPHABET_CHARS = 64 * 1024
"""The size for drawn text: enough for a quadratic pattern to show, small enough for many draws."""


def test_every_built_in_pattern_has_an_alphabet():
    assert set(ALPHABETS) == set(PATTERNS)


@pytest.mark.parametrize("name", list(ALPHABETS))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_a_pattern_takes_linear_time_on_text_from_its_own_alphabet(worker, name, data):
    symbols = st.sampled_from(ALPHABETS[name])
    unit = data.draw(st.lists(symbols, min_size=1, max_size=8).map("".join), label="unit")
    head = data.draw(st.lists(symbols, max_size=3).map("".join), label="head")
    tail = data.draw(st.sampled_from(["", "!", "\n", " ", "_", "é"]), label="tail")
    _assert_linear(worker, _regex_job(name, head, unit, tail), ALPHABET_CHARS, f"{name} on {head!r} + {unit!r}...")
