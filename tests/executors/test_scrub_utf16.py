"""An injected secret a tool writes as UTF-16 is scrubbed like any other form of it.

Executors read output as UTF-8, and UTF-16 of ASCII text is valid UTF-8: the secret with a NUL
after each character (little-endian) or before it (big-endian), at whatever byte offset the
UTF-16 text starts. A ``python`` tool's bytes that are not UTF-8 (a byte-order mark makes them so)
are shown as hex. Neither was recognised: redactions=0, and the model could read the token back
by leaving the NULs out. Real tools through a real gateway for each executor (subprocess, http,
mcp, python), the review's own reproduction (``printf %s "$TOKEN" | iconv -t UTF-16LE``), the
cap of a subprocess's output, and the scrubber's time on input aimed at the new forms.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from gateway.config import load_config
from gateway.executors.capture import CappedOutput
from gateway.scrub import PATTERN_MARGIN_BYTES, REDACTED, Scrubber
from tests.conftest import DEMO_CONFIG, JsonLineWorker, call_each
from tests.executors.test_output_patterns_linear import ROOT, SCRUB_CHARS, _assert_linear, _WORKER

TOKEN = "tg-Sup3r/Secret+Token=42-utf16"
"""Shaped like no built-in pattern, so only its exact forms can remove it."""
CODECS = ("utf-16-le", "utf-16-be", "utf-16")  # "utf-16": this machine's order, after a byte-order mark
WINDOW = 8
"""A run of this many of the token's characters readable anywhere is a leak."""

WRITER = """
import os, sys
codec, stream, offset, code = sys.argv[1:]
out = getattr(sys, stream).buffer
out.write(b"x" * int(offset) + ("token: " + os.environ["API_TOKEN"] + " end").encode(codec))
out.flush()
sys.exit(int(code))
"""
"""A subprocess tool: the credential as UTF-16, after ``offset`` bytes, to stdout or stderr."""

AROUND = """
import os, sys
ordinary = "build 42 ok\\u00e9\\n".encode() + "hello".encode("utf-16-le") + b"\\0a.txt\\0b.txt\\0"
sys.stdout.buffer.write(ordinary + os.environ["API_TOKEN"].encode("utf-16-le") + ordinary)
"""
"""Ordinary output (non-ASCII text, a UTF-16 word, NUL-separated names) on both sides of the secret."""

UPSTREAM = """
import os, sys
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
server = MCPServer("utf16")
@server.tool(description="The credential as UTF-16 text read as UTF-8.")
def token_text(codec: str) -> str:
    return os.environ["UPSTREAM_TOKEN"].encode(codec).decode("utf-8", "replace")
@server.tool(description="The credential as UTF-16 on stderr, then a failure.")
def token_stderr(codec: str) -> str:
    sys.stderr.buffer.write(b"x" + os.environ["UPSTREAM_TOKEN"].encode(codec))
    sys.stderr.flush()
    raise ToolError("failed on purpose")
server.run()
"""


def utf16_bytes(args, ctx):
    """A python tool returning its credential as UTF-16 bytes: valid UTF-8 without a byte-order
    mark (text with NULs), not UTF-8 with one (shown as hex)."""
    token = ctx.credentials.env["API_TOKEN"]
    return {codec: token.encode(codec) for codec in CODECS}


def _enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


def _config(tmp_path: Path, http_base: str = "", http_port: int = 0) -> Path:
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["policy"]["bundle"] = str(DEMO_CONFIG.parent.parent / "rego")
    raw["data_dir"] = str(tmp_path / "data")
    env_token = [{"secret": "api_token", "inject": "env", "name": "API_TOKEN"}]
    raw["tools"] = [
        {"name": "utf16_cmd", "risk": {"side_effect": "read"}, "credentials": env_token,
         "input_schema": {"type": "object", "properties": {
             "codec": _enum(*CODECS), "stream": _enum("stdout", "stderr"), "offset": _enum("0", "1"),
             "code": _enum("0", "1")}, "required": ["codec", "stream", "offset", "code"]},
         "executor": {"kind": "subprocess", "argv": [sys.executable, "-c", WRITER, "{codec}", "{stream}", "{offset}",
                                                     "{code}"]}},
        {"name": "utf16_capped", "risk": {"side_effect": "read"}, "credentials": env_token,
         "executor": {"kind": "subprocess", "argv": [sys.executable, "-c", WRITER, "utf-16-le", "stdout", "1", "0"],
                      "options": {"max_output_bytes": 32}}},
        {"name": "utf16_around", "risk": {"side_effect": "read"}, "credentials": env_token,
         "executor": {"kind": "subprocess", "argv": [sys.executable, "-c", AROUND]}},
        {"name": "utf16_python", "risk": {"side_effect": "read"}, "credentials": env_token,
         "executor": {"kind": "python", "callable": "tests.executors.test_scrub_utf16:utf16_bytes"}},
        {"name": "utf16_mcp_text", "risk": {"side_effect": "read"},
         "input_schema": {"type": "object", "properties": {"codec": _enum(*CODECS)}, "required": ["codec"]},
         "credentials": [{"secret": "api_token", "inject": "env", "name": "UPSTREAM_TOKEN"}],
         "executor": {"kind": "mcp", "server": "utf16", "remote_tool": "token_text"}},
        {"name": "utf16_mcp_stderr", "risk": {"side_effect": "read"},
         "input_schema": {"type": "object", "properties": {"codec": _enum(*CODECS)}, "required": ["codec"]},
         "credentials": [{"secret": "api_token", "inject": "env", "name": "UPSTREAM_TOKEN"}],
         "executor": {"kind": "mcp", "server": "utf16", "remote_tool": "token_stderr"}},
    ]
    if shutil.which("iconv"):  # the review's reproduction, as it ran it
        raw["tools"].append(
            {"name": "iconv_cmd", "risk": {"side_effect": "read"}, "credentials": env_token,
             "executor": {"kind": "subprocess",
                          "argv": [shutil.which("sh"), "-c", 'printf %s "$API_TOKEN" | iconv -t UTF-16LE']}})
    if http_base:
        raw["tools"].append(
            {"name": "utf16_http", "risk": {"side_effect": "read"},
             "input_schema": {"type": "object", "properties": {"codec": _enum(*CODECS)}, "required": ["codec"]},
             "credentials": [{"secret": "api_token", "inject": "header", "name": "Authorization",
                              "format": "Bearer {value}"}],
             "executor": {"kind": "http", "url": http_base + "/utf16/{codec}",
                          "allowed_hosts": [f"127.0.0.1:{http_port}"], "options": {"allow_plain_http": True}}})
    raw["mcp_upstreams"] = {"utf16": {"transport": "stdio", "command": sys.executable, "args": ["-c", UPSTREAM]}}
    raw["secrets"] = {"providers": [{"kind": "static", "values": {"acme": {"api_token": TOKEN}}}]}
    path = tmp_path / "toolgate.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


async def _calls(tmp_path: Path, calls: list[tuple[str, dict]], **http) -> list:
    return await call_each(load_config(_config(tmp_path, **http)), calls)


def _shown(response) -> list[str]:
    """What the model is shown of a call's observation: its data (as sent), summary and error."""
    o = response.observation
    return [o.data_json.decode(), o.summary, o.error.type, o.error.message]


_HEX_RUN = re.compile(r"[0-9A-Fa-f]{8,}")


def _readable(texts: list[str], token: str = TOKEN) -> list[str]:
    """The runs of ``WINDOW`` characters of ``token`` a reader of ``texts`` can get back: as
    written, with the NULs (and JSON's ``\\u0000``) left out, or from hex read as UTF-16."""
    views = []
    for text in texts:
        views += [text, text.replace("\0", ""), text.replace("\\u0000", "")]
        for run in _HEX_RUN.findall(text):
            for start in (0, 1):
                raw = bytes.fromhex(run[start:len(run) - (len(run) - start) % 2])
                for skip in (0, 1):
                    for codec in ("utf-16-le", "utf-16-be"):
                        views.append(raw[skip:].decode(codec, "ignore").replace("\0", ""))
    windows = {token[i:i + WINDOW] for i in range(len(token) - WINDOW + 1)}
    return sorted(w for w in windows if any(w in view for view in views))


@pytest.mark.parametrize("stream, code", [("stdout", "0"), ("stdout", "1"), ("stderr", "1")])
@pytest.mark.parametrize("offset", ["0", "1"])
@pytest.mark.parametrize("codec", CODECS)
async def test_a_subprocess_writing_its_credential_as_utf16_shows_none_of_it(tmp_path, codec, offset, stream, code):
    args = {"codec": codec, "stream": stream, "offset": offset, "code": code}
    (response,) = await _calls(tmp_path, [("utf16_cmd", args)])
    assert response.code == ("ok" if code == "0" else "tool_error"), response
    assert response.observation.redactions >= 1, response
    assert _readable(_shown(response)) == [], response
    assert "token: " in "".join(_shown(response)).replace("\0", "").replace("\\u0000", "")  # the rest is shown
    audit = (tmp_path / "data" / "audit.jsonl").read_text()
    store = b"".join(p.read_bytes() for p in (tmp_path / "data").glob("toolgate.db*")).decode("utf-8", "replace")
    assert _readable([audit, store]) == []


@pytest.mark.skipif(shutil.which("iconv") is None, reason="no iconv on this machine")
async def test_the_reviews_reproduction_with_iconv_redacts_the_token(tmp_path):
    (response,) = await _calls(tmp_path, [("iconv_cmd", {})])
    assert response.code == "ok" and response.observation.redactions == 1, response
    assert json.loads(response.observation.data_json)["stdout"] == REDACTED + "\0"
    assert _readable(_shown(response)) == []


async def test_only_the_secret_is_removed_from_ordinary_output_around_it(tmp_path):
    (response,) = await _calls(tmp_path, [("utf16_around", {})])
    ordinary = "build 42 ok\u00e9\n" + "hello".encode("utf-16-le").decode() + "\0a.txt\0b.txt\0"
    assert response.code == "ok" and response.observation.redactions == 1, response
    # the NUL after the token's last character (little-endian) stays: it hides nothing
    assert json.loads(response.observation.data_json)["stdout"] == ordinary + REDACTED + "\0" + ordinary


async def test_the_output_cap_never_cuts_a_utf16_secret_in_half(tmp_path):
    """32 bytes: "x", "token: " and the token's first 9 characters, as UTF-16. The cut moves to
    before the token, which is then not in what is kept at all (and nothing of it is redacted)."""
    (response,) = await _calls(tmp_path, [("utf16_capped", {})])
    assert response.code == "ok" and response.observation.truncated, response
    stdout = json.loads(response.observation.data_json)["stdout"]
    assert stdout.replace("\0", "") == "xtoken: ", stdout
    assert _readable(_shown(response)) == []


@pytest.mark.parametrize("codec", CODECS)
async def test_an_http_body_in_utf16_shows_none_of_the_injected_header(tmp_path, http_server, codec):
    def route(seen):
        return 200, {"content-type": f"text/plain; charset={codec}"}, seen.headers["authorization"].encode(codec)

    upstream = http_server({f"/utf16/{c}": route for c in CODECS})
    (response,) = await _calls(tmp_path, [("utf16_http", {"codec": codec})], http_base=upstream.base,
                               http_port=upstream.port)
    assert response.code == "ok" and response.observation.redactions >= 1, response
    assert upstream.seen[0].headers["authorization"] == f"Bearer {TOKEN}"  # it was injected
    assert _readable(_shown(response)) == []


@pytest.mark.parametrize("codec", CODECS)
async def test_an_mcp_upstream_writing_its_credential_as_utf16_shows_none_of_it(tmp_path, codec):
    calls = [("utf16_mcp_text", {"codec": codec}), ("utf16_mcp_stderr", {"codec": codec})]
    text, stderr = await _calls(tmp_path, calls)
    assert text.code == "ok" and text.observation.redactions >= 1, text
    assert stderr.code == "tool_error" and stderr.observation.redactions >= 1, stderr
    assert "failed on purpose" in stderr.observation.error.message
    assert _readable(_shown(text) + _shown(stderr)) == []


async def test_a_python_tools_utf16_bytes_show_none_of_the_credential(tmp_path):
    le = TOKEN.encode("utf-16-le")  # the check reads each of these back: hex as UTF-16, NULs left out
    assert _readable([(b"\xff\xfe" + le).hex()]) and _readable([("x" + TOKEN.encode("utf-16-be").hex()).upper()])
    assert _readable([le.decode("utf-8")]) and _readable([json.dumps(le.decode("utf-8"))])
    assert _readable([f"{REDACTED}\0-\0S\0u\0p\0{REDACTED}"]) == []  # 4 characters: not a leak
    (response,) = await _calls(tmp_path, [("utf16_python", {})])
    assert response.code == "ok" and response.observation.redactions == len(CODECS), response
    data = json.loads(response.observation.data_json)
    assert data["utf-16"].startswith(("fffe", "feff")), data  # not UTF-8: its hex, the secret's part redacted
    assert _readable(_shown(response)) == []


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_captured_utf16_at_either_byte_offset_is_scrubbed(codec, offset):
    """The executors' capture and the scrubber alone, for each byte order and both alignments."""
    output = CappedOutput(1 << 20, [TOKEN])
    output.feed(b"\xc3" * offset + ("id " + TOKEN + " end").encode(codec))  # a lead byte first: no help to it
    text, count = Scrubber([TOKEN]).text(output.text())
    assert count == 1 and _readable([text]) == [], repr(text)


# the scrubber's time on text aimed at the new forms: near misses of the UTF-16 form, and copies of it
# overlapping a cut, at an executor's cap plus margin (tests/executors/test_output_patterns_linear.py)
_UTF16 = "\0".join(TOKEN)
ADVERSARIAL = [
    ("text", _UTF16[:-1] + "\0"),  # each nearly the form, failing at its last character
    ("text", "\0".join(TOKEN[:-1]) + "\0\0"),
    ("cut", _UTF16[:-1] + "\0"),
    ("cut", _UTF16 + "\0"),  # whole forms back to back, the cut across one of them
]


@pytest.fixture(scope="module")
def worker():
    w = JsonLineWorker(_WORKER, cwd=ROOT)
    yield w
    w.close()


@pytest.mark.parametrize("kind, unit", ADVERSARIAL, ids=[f"{k}:{u[:12]!r}" for k, u in ADVERSARIAL])
def test_the_scrubber_takes_linear_time_on_input_aimed_at_the_utf16_forms(worker, kind, unit):
    scrubber = Scrubber([TOKEN])
    near = (unit * (SCRUB_CHARS // len(unit)))[:SCRUB_CHARS - len(_UTF16)]
    if kind == "text":  # and still finds the form after them
        assert scrubber.text(near + _UTF16) == (near + REDACTED, 1)
    else:  # and a cut across the form moves to its start
        assert scrubber.cut(near + _UTF16 + "x" * 64, len(near) + 5) == near
    job = {"kind": kind, "secrets": [TOKEN], "margin": PATTERN_MARGIN_BYTES, "head": "", "unit": unit, "tail": ""}
    _assert_linear(worker, job, SCRUB_CHARS, f"Scrubber.{kind} on {unit[:24]!r}...")


def test_ordinary_output_costs_about_what_it_did(monkeypatch):
    """The new forms are a few more literal alternatives of one regex, with the first characters the
    secret's other forms have already: on ordinary output the whole scrub costs at most 1.5 times
    what it costs without them (measured: 1.02; the alternation alone, 1.5)."""
    import gateway.scrub as scrub

    words = ["build", "42", "ok", "src/main.py:17", "warning:", "tg-", "Token", "=", "Sup3r", "http://x/a", "\n"]
    text = " ".join(words[(i * 7) % len(words)] for i in range(40_000))
    with_forms = Scrubber([TOKEN, "Bearer " + TOKEN])
    assert with_forms.text("a " + _UTF16 + " b")[1] == 1  # the new forms are in it
    monkeypatch.setattr(scrub, "_utf16_forms", lambda value: set())
    scrub._exact_forms.cache_clear()  # the forms of a set of secrets are kept: made again, without
    without = Scrubber([TOKEN, "Bearer " + TOKEN])
    monkeypatch.undo()
    scrub._exact_forms.cache_clear()  # and not kept so for the tests after this one

    def seconds(scrubber: Scrubber) -> float:
        started = time.process_time()
        scrubber.text(text)
        return time.process_time() - started

    best = {"with": float("inf"), "without": float("inf")}
    for _ in range(15):
        best["with"] = min(best["with"], seconds(with_forms))
        best["without"] = min(best["without"], seconds(without))
    assert best["with"] <= 1.5 * best["without"], best
