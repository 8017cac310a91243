"""OPAEngine's own HTTP/1.1 client against a scripted fake OPA on 127.0.0.1 (no OPA needed).

Each malformed answer is its own case: it must deny with the right code, and the next call
on the same engine must get a decision again. Then keep-alive, the one stale-connection
retry (and that nothing else is retried), timeouts, cancellation and concurrency.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from policies import OPAEngine, PolicyError

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict], Awaitable[bool]]
"""Answers one request; returns whether the server keeps the connection open."""


def response(body: bytes, *, status: bytes = b"200 OK", headers: bytes | None = None) -> bytes:
    if headers is None:
        headers = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return b"HTTP/1.1 " + status + b"\r\n" + headers + b"\r\n" + body


def decision_body(request: dict) -> bytes:
    """What the fake decides: allow, with the input's ``n`` as the reason (so answers are distinct)."""
    n = request.get("input", {}).get("n", 0)
    return json.dumps({"result": {"decision": "allow", "reasons": [f"n={n}"]}, "decision_id": f"id-{n}"}).encode()


async def good(reader, writer, request) -> bool:
    writer.write(response(decision_body(request)))
    return True


def raw(data: bytes, *, close: bool = False) -> Reply:
    async def reply(reader, writer, request) -> bool:
        writer.write(data)
        return not close

    return reply


def bytewise(data: bytes) -> Reply:
    async def reply(reader, writer, request) -> bool:
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
        return True

    return reply


async def hang(reader, writer, request) -> bool:
    await reader.read()  # never answer; return when the client hangs up
    return False


class FakeOPA:
    """An HTTP/1.1 server that answers request i with ``replies[i]`` (then ``good``)."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[bytes, dict]] = []
        self.connections = 0
        self.hangups = 0
        self._hangup = asyncio.Condition()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def wait_for_hangups(self, count: int) -> None:
        """Until the client has closed ``count`` connections (bounded)."""
        async with asyncio.timeout(5):
            async with self._hangup:
                await self._hangup.wait_for(lambda: self.hangups >= count)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        keep = True
        try:
            while keep:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break  # the client closed the connection
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                request = json.loads(await reader.readexactly(length))
                self.requests.append((head, request))
                reply = self.replies.pop(0) if self.replies else good
                keep = await reply(reader, writer, request)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            async with self._hangup:
                self.hangups += 1
                self._hangup.notify_all()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOPA]:
    server = FakeOPA()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def engine(fake: FakeOPA) -> AsyncIterator[OPAEngine]:
    opa = OPAEngine(fake.url, timeout_ms=300)
    yield opa
    await opa.close()


async def denial(engine: OPAEngine, doc: dict | None = None) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        await engine.evaluate(doc or {"n": 0})
    return info.value


async def assert_recovers(engine: OPAEngine) -> None:
    decision = await engine.evaluate({"n": 7})
    assert (decision.decision, decision.reasons, decision.engine_decision_id) == ("allow", ["n=7"], "id-7")


ALLOW = b'{"result":{"decision":"allow"}}'
MALFORMED = {
    "garbage_status_line": raw(b"HTXP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"),
    "http2_status_line": raw(b"HTTP/2 200\r\nContent-Length: 2\r\n\r\n{}"),
    "not_http_at_all": raw(b"hello\r\n\r\n", close=True),
    "interim_100": raw(b"HTTP/1.1 100 Continue\r\n\r\n" + response(ALLOW)),
    "malformed_header_line": raw(response(ALLOW, headers=b"Content-Length: 31\r\nno colon here\r\n")),
    "folded_header_line": raw(response(ALLOW, headers=b"Content-Length: 31\r\nX-A: b\r\n c\r\n")),
    "no_framing": raw(response(ALLOW, headers=b"Content-Type: application/json\r\n")),
    "negative_content_length": raw(response(ALLOW, headers=b"Content-Length: -31\r\n")),
    "conflicting_content_lengths": raw(response(ALLOW, headers=b"Content-Length: 31\r\nContent-Length: 30\r\n")),
    "content_length_and_chunked": raw(response(b"1f\r\n" + ALLOW + b"\r\n0\r\n\r\n", headers=b"Content-Length: 31\r\nTransfer-Encoding: chunked\r\n")),
    "gzip_transfer_encoding": raw(response(ALLOW, headers=b"Transfer-Encoding: gzip, chunked\r\n")),
    "bad_chunk_size": raw(response(b"zz\r\n" + ALLOW + b"\r\n0\r\n\r\n", headers=b"Transfer-Encoding: chunked\r\n")),
    "chunk_without_crlf": raw(response(b"1f\r\n" + ALLOW + b"XX0\r\n\r\n", headers=b"Transfer-Encoding: chunked\r\n")),
    "larger_than_max_body": raw(response(b"", headers=b"Content-Length: 999999999999\r\n")),
    "head_too_large": raw(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n", close=True),
    "truncated_body_then_close": raw(response(ALLOW)[:-10], close=True),
    "closed_after_headers": raw(response(ALLOW)[: -len(ALLOW)], close=True),
    "truncated_chunked_then_close": raw(response(b"1f\r\n" + ALLOW[:10], headers=b"Transfer-Encoding: chunked\r\n"), close=True),
    "closed_before_any_byte": raw(b"", close=True),
    "content_length_too_small": raw(response(ALLOW, headers=b"Content-Length: 20\r\n")),
    "body_not_json": raw(response(b"<html>oops</html>")),
    "body_not_object": raw(response(b"[1]")),
    "server_error_500": raw(response(b'{"code":"internal_error","message":"eval_conflict_error"}', status=b"500 Internal Server Error")),
    "bad_request_400": raw(response(b'{"code":"invalid_parameter"}', status=b"400 Bad Request")),
    "redirect_307": raw(response(b"", status=b"307 Temporary Redirect", headers=b"Location: http://evil/\r\nContent-Length: 0\r\n")),
    "no_content_204": raw(response(b"", status=b"204 No Content", headers=b"")),
    # JSON readers disagree on (json.loads keeps a repeated key's last value: this deny read as allow)
    "repeated_decision_key": raw(response(b'{"result":{"decision":"deny","reasons":["no"],"decision":"allow"}}')),
    "repeated_result_key": raw(response(b'{"result":{"decision":"deny"},"result":{"decision":"allow"}}')),
    "nan_in_constraints": raw(response(b'{"result":{"decision":"allow","constraints":{"max_bytes":NaN}}}')),
    "infinity_in_constraints": raw(response(b'{"result":{"decision":"allow","constraints":{"n":-Infinity}}}')),
    "number_past_a_double": raw(response(b'{"result":{"decision":"allow","constraints":{"n":1e400}}}')),
    # text with no UTF-8 form: the decision's audit record could not be written (was a gRPC INTERNAL)
    "lone_surrogate_escaped": raw(response(b'{"result":{"decision":"allow","reasons":["bad \\ud800 reason"]}}')),
    "lone_surrogate_in_a_key": raw(response(b'{"result":{"decision":"allow","constraints":{"\\uDC00":1}}}')),
    "surrogate_in_utf8_bytes": raw(response(b'{"result":{"decision":"allow","reasons":["\xed\xa0\x80"]}}')),
}


@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_answer_denies_unavailable_and_the_next_call_recovers(fake, engine, reply):
    fake.replies = [reply]
    assert (await denial(engine)).code == "policy_unavailable"
    await assert_recovers(engine)


@pytest.mark.parametrize(
    "body",
    [b"{}", b'{"result":{"decision":"maybe"}}', b'{"result":[{"decision":"allow"}]}', b'{"result":{"decision":"allow","x":1}}'],
    ids=["undefined", "unknown_decision", "several_results", "unknown_field"],
)
async def test_a_well_formed_answer_without_a_valid_decision_is_invalid(fake, engine, body):
    fake.replies = [raw(response(body))]
    assert (await denial(engine)).code == "policy_invalid_decision"
    await assert_recovers(engine)
    assert fake.connections == 1  # a well-framed answer keeps the connection, whatever it says


@pytest.mark.parametrize("decision_id", ["X" * 2_000_000, "id\nforged: record", "", 7], ids=["huge", "newline", "empty", "number"])
async def test_a_decision_id_no_audit_record_should_hold_is_dropped_and_the_decision_stands(fake, engine, decision_id):
    fake.replies = [raw(response(json.dumps({"result": {"decision": "allow"}, "decision_id": decision_id}).encode()))]
    decision = await engine.evaluate({"n": 0})
    assert (decision.decision, decision.engine_decision_id) == ("allow", None)
    await assert_recovers(engine)


async def test_the_server_error_text_goes_to_the_detail_only(fake, engine):
    fake.replies = [raw(response(b'{"code":"internal_error"}', status=b"500 Internal Server Error"))]
    error = await denial(engine)
    assert "500" in error.detail and "internal_error" in error.detail
    assert str(error).startswith("policy_unavailable")


async def test_the_request_is_a_well_formed_data_api_post(fake):
    opa = OPAEngine(fake.url + "/opa/", query="data.toolgate.decision")
    try:
        await opa.evaluate({"n": 1, "text": "ünï"})
        assert await opa.query("data.toolgate.visible", {"n": 2}) == {"decision": "allow", "reasons": ["n=2"]}
    finally:
        await opa.close()
    (head1, body1), (head2, _) = fake.requests
    lines = head1.decode().split("\r\n")
    assert lines[0] == "POST /opa/v1/data/toolgate/decision HTTP/1.1"
    assert f"Host: 127.0.0.1:{fake.port}" in lines and "Content-Type: application/json" in lines
    assert body1 == {"input": {"n": 1, "text": "ünï"}}
    assert head2.startswith(b"POST /opa/v1/data/toolgate/visible HTTP/1.1\r\n")


async def test_every_path_asked_gets_its_own_request_line_past_the_kept_heads(fake, engine):
    paths = [f"data.toolgate.rule_{i}" for i in range(40)]  # more than the client keeps heads for
    for _ in range(2):
        for i, path in enumerate(paths):
            assert await engine.query(path, {"n": i}) == {"decision": "allow", "reasons": [f"n={i}"]}
    lines = [head.split(b"\r\n")[0].decode() for head, _ in fake.requests]
    assert lines == [f"POST /v1/data/toolgate/rule_{i} HTTP/1.1" for i in range(40)] * 2
    assert all(b"\r\nContent-Length: %d\r\n" % len(json.dumps(body, separators=(",", ":")).encode()) in head
               for head, body in fake.requests)


async def test_chunked_answers_with_extensions_and_trailers_are_read(fake, engine):
    chunked = b"10;ext=1\r\n" + ALLOW[:16] + b"\r\nf\r\n" + ALLOW[16:] + b"\r\n0\r\nX-Trailer: t\r\n\r\n"
    fake.replies = [raw(response(chunked, headers=b"Transfer-Encoding: chunked\r\n"))] * 2
    assert (await engine.evaluate({})).decision == "allow"
    assert (await engine.evaluate({})).decision == "allow"
    assert fake.connections == 1


async def test_an_answer_arriving_byte_by_byte_is_read(fake, engine):
    fake.replies = [bytewise(response(ALLOW))]
    assert (await engine.evaluate({})).decision == "allow"


async def test_one_connection_is_kept_alive_across_calls(fake, engine):
    for n in range(5):
        assert (await engine.evaluate({"n": n})).reasons == [f"n={n}"]
    assert fake.connections == 1


async def test_connection_close_is_honoured(fake, engine):
    fake.replies = [raw(response(ALLOW, headers=b"Connection: close\r\nContent-Length: 31\r\n"))]
    assert (await engine.evaluate({})).decision == "allow"
    await fake.wait_for_hangups(1)
    await assert_recovers(engine)
    assert fake.connections == 2


async def test_bytes_after_the_answer_keep_the_answer_but_drop_the_connection(fake, engine):
    fake.replies = [raw(response(ALLOW + b"\n", headers=b"Content-Length: 31\r\n"))]
    assert (await engine.evaluate({})).decision == "allow"
    await assert_recovers(engine)
    assert fake.connections == 2


async def test_bytes_on_an_idle_connection_drop_it(fake, engine):
    idle = asyncio.Event()

    async def then_junk(reader, writer, request) -> bool:
        writer.write(response(ALLOW))
        await writer.drain()
        await idle.wait()
        writer.write(response(ALLOW))  # an answer nobody asked for
        return True

    fake.replies = [then_junk]
    assert (await engine.evaluate({})).decision == "allow"
    idle.set()  # the connection is back in the pool now
    await fake.wait_for_hangups(1)  # the client hung up on the connection that spoke out of turn
    await assert_recovers(engine)
    assert fake.connections == 2


async def test_a_kept_alive_connection_closed_before_answering_is_retried_once(fake, engine):
    await assert_recovers(engine)
    fake.replies = [raw(b"", close=True)]
    decision = await engine.evaluate({"n": 3})
    assert decision.reasons == ["n=3"]
    assert [body for _, body in fake.requests[1:]] == [{"input": {"n": 3}}] * 2
    assert fake.connections == 2


async def test_the_retry_is_not_retried(fake, engine):
    await assert_recovers(engine)
    fake.replies = [raw(b"", close=True), raw(b"", close=True)]
    assert (await denial(engine)).code == "policy_unavailable"
    assert len(fake.requests) == 3  # the first call, then the call and its one retry
    await assert_recovers(engine)


async def test_a_fresh_connection_closed_before_answering_is_not_retried(fake, engine):
    fake.replies = [raw(b"", close=True)]
    assert (await denial(engine)).code == "policy_unavailable"
    assert len(fake.requests) == 1


async def test_a_kept_alive_connection_closed_mid_answer_is_not_retried(fake, engine):
    await assert_recovers(engine)
    fake.replies = [raw(response(ALLOW)[:12], close=True)]
    assert (await denial(engine)).code == "policy_unavailable"
    assert len(fake.requests) == 2


async def test_an_idle_connection_the_server_closed_is_not_reused(fake, engine):
    fake.replies = [raw(response(ALLOW), close=True)]  # closes without saying Connection: close
    assert (await engine.evaluate({})).decision == "allow"
    await fake.wait_for_hangups(1)
    await assert_recovers(engine)


async def test_a_server_that_never_answers_times_out_and_the_connection_is_dropped(fake, engine):
    fake.replies = [hang]
    started = time.monotonic()
    error = await denial(engine)
    assert error.code == "policy_unavailable" and "300 ms" in error.detail
    assert time.monotonic() - started < 2
    await fake.wait_for_hangups(1)  # the hung connection was aborted, not pooled
    await assert_recovers(engine)


async def test_a_caller_cancelling_mid_request_drops_the_connection(fake, engine):
    fake.replies = [hang]
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await engine.evaluate({})
    await fake.wait_for_hangups(1)
    await assert_recovers(engine)


async def test_a_server_that_is_not_listening_is_unavailable(fake, engine):
    await fake.stop()
    assert (await denial(engine)).code == "policy_unavailable"


async def test_an_input_that_is_not_json_is_unavailable_and_nothing_is_sent(fake, engine):
    for doc in ({"x": float("nan")}, {"x": object()}, {"x": "\ud800"}):
        assert (await denial(engine, doc)).code == "policy_unavailable"
    assert fake.requests == []


async def test_64_concurrent_calls_each_get_their_own_answer(fake, engine):
    decisions = await asyncio.gather(*(engine.evaluate({"n": n}) for n in range(64)))
    assert [d.reasons for d in decisions] == [[f"n={n}"] for n in range(64)]
    assert [d.engine_decision_id for d in decisions] == [f"id-{n}" for n in range(64)]
    assert fake.connections <= 64
    again = await asyncio.gather(*(engine.evaluate({"n": n}) for n in range(64)))
    assert [d.reasons for d in again] == [[f"n={n}"] for n in range(64)]
    assert fake.connections <= 64  # the second wave reused the first wave's connections


async def test_concurrent_calls_beyond_the_pool_wait_for_a_connection(fake):
    opa = OPAEngine(fake.url, timeout_ms=5000)
    try:
        decisions = await asyncio.gather(*(opa.evaluate({"n": n}) for n in range(200)))
    finally:
        await opa.close()
    assert [d.reasons for d in decisions] == [[f"n={n}"] for n in range(200)]
    assert fake.connections <= 64


async def test_a_closed_engine_denies(fake, engine):
    await assert_recovers(engine)
    await engine.close()
    assert (await denial(engine)).code == "policy_unavailable"
    await fake.wait_for_hangups(1)


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1:1", "http://user:secret@127.0.0.1:8181", "http://127.0.0.1:8181?x=1", "http://127.0.0.1:8181#f",
     "http://127.0.0.1:99999", "http://", "http://127.0.0.1:8181/a b", "unix://relative/opa.sock", "127.0.0.1:8181"],
)
def test_urls_the_engine_cannot_use_are_refused_at_construction(url):
    with pytest.raises(ValueError):
        OPAEngine(url)


async def test_https_uses_httpx_and_an_unreachable_one_is_unavailable():
    opa = OPAEngine("https://127.0.0.1:1", timeout_ms=300)
    try:
        assert (await denial(opa)).code == "policy_unavailable"
    finally:
        await opa.close()


async def test_a_character_written_as_an_escaped_surrogate_pair_is_read(fake, engine):
    fake.replies = [raw(response(b'{"result":{"decision":"allow","reasons":["ok \\ud83d\\ude00"]}}'))]
    decision = await engine.evaluate({"n": 0})
    assert (decision.decision, decision.reasons) == ("allow", ["ok \U0001F600"])
