"""HTTP as a client sees it, on raw sockets: a real uvicorn run as `serve` runs it
(`listen.uvicorn_config`): pipelining, keep-alive, Connection: close, 413 with and without
a length, 401, chunked bodies, query strings, clients that leave mid-body or send too
slowly, stray bytes between requests, and trailers that must never count as headers."""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import orjson
import pytest

from replay_server.paths import RESPONSES_PATH
from replay_server.saved.record import validate
from replay_server.settings import DEFAULT_READ_TIMEOUT, Settings
from replay_server.web import listen
from replay_server.web.app import ReplayApp, create_app
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    on_free_port,
    user,
    wait_for,
)

pytestmark = pytest.mark.http

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MAX_BODY = 3000


def responses_record() -> Any:
    response = {"id": "resp_1", "object": "response", "status": "completed", "model": MODEL,
                "output": [{"id": "msg_1", "type": "message", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": "Hello there.",
                                         "annotations": []}]}],
                "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}
    return validate({"replay_record": 1, "endpoint": RESPONSES_PATH, "model": MODEL,
                     "request": {"model": MODEL, "input": "hi"}, "response": response},
                    "saved.jsonl", 9)


RECORDS = [
    chat_record("2+2?", chat_response("4", reasoning="2 plus 2 is 4"), line=1),
    chat_record("colors?", chat_response("red", "blue"), line=2),
    chat_record("same?", chat_response("x"), instance=1, line=3),
    chat_record("same?", chat_response("y"), instance=2, line=4),
    chat_record("broken?", None, unusable="the saved text is null", line=5),
    completion_record("The capital of France is", completion_response(" Paris."), line=7),
    completion_record("1 + 1 =", completion_response(" 2"), line=8),
    responses_record(),
    chat_record("count?", chat_response("1", "2", "3", "4"), line=10),  # n=1: one by one
]


def chat(text: str, **more: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": user(text), **more}


def post(path: str, body: Any, *headers: str, chunks: int = 0,
         trailers: tuple[str, ...] = ()) -> bytes:
    """A POST as bytes; `chunks` > 0 sends the body chunked, in that many pieces, and then
    the `trailers` fields."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    lines = [f"POST {path} HTTP/1.1", "host: test", "content-type: application/json",
             *headers]
    if not chunks:
        lines.append(f"content-length: {len(data)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + data
    lines.append("transfer-encoding: chunked")
    step = -(-len(data) // chunks)
    pieces = [data[i:i + step] for i in range(0, len(data), step)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n"
    framed += "".join(f"{t}\r\n" for t in trailers).encode() + b"\r\n"
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + framed


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: test\r\n\r\n".encode()


# every kind of request the replay endpoints answer, and every kind of error
REQUESTS = [
    post(CHAT, chat("2+2?")),
    post(CHAT, chat("2+2?", stream=True, stream_options={"include_usage": True})),
    post(CHAT, chat("colors?", n=2)),
    post(CHAT, chat("colors?", n=2, stream=True)),
    post(CHAT, chat("same?")),  # ambiguous
    post(CHAT, chat("colors?")),
    post(CHAT, chat("colors?")),
    post(CHAT, chat("colors?")),  # exhausted
    post(CHAT, chat("broken?")),
    post(CHAT, chat("never saved")),
    post(COMPLETIONS, {"model": MODEL, "prompt": "The capital of France is"}),
    post(COMPLETIONS, {"model": MODEL, "prompt": ["The capital of France is", "1 + 1 ="]}),
    post(COMPLETIONS, {"model": MODEL, "prompt": "1 + 1 =", "stream": True}),
    post(RESPONSES_PATH, {"model": MODEL, "input": "hi"}),
    post(RESPONSES_PATH, {"model": MODEL, "input": "hi", "stream": True}),
    post(CHAT, b"{not json"),
    post(CHAT, b""),
    post(CHAT, {"model": 3, "messages": "x"}),
    post(CHAT, {"model": MODEL, "messages": [{"role": "user", "content": 5}]}),
    post(COMPLETIONS, {"model": MODEL}),
    post(CHAT, chat("2+2?", model="no/such-model")),
    post(CHAT, chat("x" * MAX_BODY)),  # 413 by its Content-Length
    post(CHAT, chat("x" * MAX_BODY), chunks=3),  # 413 without one
    post(CHAT, chat("2+2?"), chunks=4),
    post(CHAT + "?a=b", chat("2+2?")),  # a query string is ignored
    post(CHAT + "?a=b#c", chat("2+2?")),  # and so is a fragment
    post(CHAT + "%3Fa", chat("2+2?")),  # an escaped "?" is part of the path: unknown
    post(CHAT, chat("2+2?"), "connection: keep-alive", "x-extra: 1"),
]
STATUSES = [200, 200, 200, 200, 400, 200, 200, 400, 400, 400, 200, 200, 200, 200, 200, 400, 400,
            400, 400, 400, 404, 413, 413, 200, 200, 200, 404, 200]


@contextmanager
def listening(app: Any, read_timeout: float = DEFAULT_READ_TIMEOUT,
              keep_alive: float = 5) -> Iterator[int]:
    """uvicorn serving `app` as `serve` runs it, on a free port."""
    config = listen.uvicorn_config(app, "warning", False, read_timeout,
                                   timeout_keep_alive=keep_alive)
    with on_free_port(config) as port:
        yield port


def read_response(f: BinaryIO) -> bytes:
    """One whole response, as sent: its head, then its body by its framing."""
    head = b""
    while not head.endswith(b"\r\n\r\n") or head.endswith(b"HTTP/1.1 100 Continue\r\n\r\n"):
        if head.endswith(b"\r\n\r\n"):  # an interim 100 Continue: the answer follows
            head += b"<then>"
        line = f.readline()
        if not line:
            raise EOFError(head)
        head += line
    if re.match(rb"(<then>)?HTTP/1.1 (204|304) ", head.rsplit(b"<then>", 1)[-1]):
        return head  # no body
    length = re.search(rb"\r\ncontent-length: (\d+)\r\n", head)
    if length is not None:
        return head + f.read(int(length[1]))
    assert b"\r\ntransfer-encoding: chunked\r\n" in head, head
    body = b""
    while True:
        size = f.readline()
        n = int(size, 16)
        body += size + f.read(n + 2)
        if n == 0:
            return head + body


def normal(response: bytes) -> bytes:
    return re.sub(rb"\r\ndate: [^\r]*\r\n", b"\r\ndate: -\r\n", response, count=1)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def one_by_one(port: int, requests: list[bytes]) -> list[bytes]:
    """Each request sent once the previous answer came, on one connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rb")
        answers = []
        for request in requests:
            s.sendall(request)
            answers.append(normal(read_response(f)))
        return answers


def pipelined(port: int, requests: list[bytes]) -> list[bytes]:
    """All the requests in one send, then their answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"".join(requests))
        f = s.makefile("rb")
        return [normal(read_response(f)) for _ in requests]


def closed_after(port: int, requests: list[bytes]) -> list[bytes]:
    """The answers to `requests` sent at once, then b"<closed>" if the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"".join(requests))
        f = s.makefile("rb")
        answers = []
        while True:
            try:
                answers.append(normal(read_response(f)))
            except EOFError as e:
                assert e.args == (b"",)
                return [*answers, b"<closed>"]


def served(talk: Callable[[int], list[bytes]], keep_alive: float = 5,
           read_timeout: float = DEFAULT_READ_TIMEOUT, **settings: Any
           ) -> tuple[list[bytes], ReplayApp]:
    """The answers `talk` gets from a fresh server, and its app (to read its counts)."""
    app = create_app(Settings(max_body_size=MAX_BODY, **settings), build(RECORDS))
    assert isinstance(app, ReplayApp)
    with listening(app, read_timeout=read_timeout, keep_alive=keep_alive) as port:
        return talk(port), app


def test_every_kind_of_answer() -> None:
    answers, app = served(lambda port: one_by_one(port, REQUESTS))
    assert [status_of(a) for a in answers] == STATUSES
    assert b"\r\ntransfer-encoding: chunked\r\n" in answers[1]  # a stream
    assert b"\r\ncontent-length: " in answers[0]
    assert answers[-1].startswith(b"HTTP/1.1 200 OK\r\ndate: -\r\nserver: uvicorn\r\n")
    assert answers[24] == answers[25]  # query string and fragment ignored alike
    assert app.replayer.stats.requests == len(REQUESTS)


def test_pipelined_requests_are_answered_in_order() -> None:
    requests = [REQUESTS[0], get("/health"), REQUESTS[1], post(CHAT, chat("colors?")),
                get("/health"), REQUESTS[13], REQUESTS[21], post(CHAT, chat("colors?"))]
    answers, _ = served(lambda port: pipelined(port, requests))
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [
        b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 413 Request Entity Too Large",
        b"HTTP/1.1 200 OK"]
    assert b'"content":"red"' in answers[3] and b'"content":"blue"' in answers[7]


def test_every_request_pipelined_gets_the_answer_it_gets_alone() -> None:
    alone, _ = served(lambda port: one_by_one(port, REQUESTS))
    together, _ = served(lambda port: pipelined(port, REQUESTS))
    assert together == alone


def test_a_connection_is_kept_alive_across_many_requests() -> None:
    requests = [REQUESTS[i % 4] for i in range(200)] + [get("/health")]
    answers, app = served(lambda port: one_by_one(port, requests))
    assert len(answers) == 201 and all(status_of(a) == 200 for a in answers)
    assert app.replayer.stats.requests == 200


def test_the_api_key_is_checked() -> None:
    requests = [REQUESTS[0], post(CHAT, chat("2+2?"), "authorization: Bearer wrong"),
                post(CHAT, chat("2+2?"), "authorization: Bearer sesame"),
                post(RESPONSES_PATH, {"model": MODEL, "input": "hi"}),
                post(CHAT, chat("x" * MAX_BODY)), get("/health"), get("/v1/models"),
                post(CHAT, chat("2+2?"), "authorization: Bearer sesame", chunks=2),
                # the tokenizer endpoints are open, as vLLM's (its key guards /v1 only):
                # no recorded answer here, so each is a tokenizer_unanswered 404, not a 401
                post("/tokenize", {"model": MODEL, "prompt": "x"}), get("/tokenizer_info")]
    answers, _ = served(lambda port: one_by_one(port, requests), api_key="sesame")
    assert [status_of(a) for a in answers] == [401, 401, 200, 401, 401, 200, 401, 200,
                                               404, 404]
    assert all(b"tokenizer_unanswered" in a for a in answers[-2:])


def test_connection_close_is_answered_then_closed() -> None:
    requests = [REQUESTS[0], post(CHAT, chat("colors?"), "connection: close"),
                post(CHAT, chat("colors?"))]  # after the close: never answered, nor counted
    answers, app = served(lambda port: closed_after(port, requests))
    assert len(answers) == 3 and answers[-1] == b"<closed>"
    assert b"\r\nconnection: close\r\n" in answers[1]
    assert app.replayer.stats.requests == 2


def test_a_client_that_shuts_its_side_once_its_request_is_sent_gets_the_answer() -> None:
    """The end of the client's stream closes the connection, but only once what was
    written for it has left (answers wait for the end of their loop step to leave)."""
    def shut_after(port: int) -> list[bytes]:
        answers = []
        for request in (REQUESTS[0], REQUESTS[1], get("/health")) * 5:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(request)
                s.shutdown(socket.SHUT_WR)
                answers.append(normal(read_response(s.makefile("rb"))))
        return answers

    answers, app = served(shut_after)
    assert [status_of(a) for a in answers] == [200] * 15
    assert app.replayer.stats.requests == app.replayer.stats.answered == 10


def content(answer: bytes) -> str:
    """The text of a chat answer's one choice."""
    text: str = orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["choices"][0]["message"][
        "content"]
    return text


def test_requests_pipelined_before_a_half_close_are_each_answered() -> None:
    """A half-close ends what the client sends, not what it reads: every request received
    before it is answered, in order, and then the connection is closed. Each answer is
    the sample it took: the next request gets the next one."""
    def three_then_shut(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(post(CHAT, chat("count?")) * 3)
            s.shutdown(socket.SHUT_WR)
            with s.makefile("rb") as f:
                answers = [normal(read_response(f)) for _ in range(3)]
                assert f.read() == b""  # then closed
        return answers + one_by_one(port, [post(CHAT, chat("count?"))])

    answers, app = served(three_then_shut)
    # (whether the last of them says `connection: close` depends on whether the half-close
    # was read before it was written: not asserted)
    assert [content(a) for a in answers] == ["1", "2", "3", "4"]
    stats = app.replayer.stats
    assert stats.requests == stats.answered == 4 and stats.undelivered == 0


def test_an_answer_never_delivered_takes_no_sample() -> None:
    """A client that stops reading, then resets its connection: the answer that waited
    for room to be written never leaves, so the sample it was to carry is given back (the
    next request gets it) and the request is counted as undelivered, not answered."""
    big = chat_record("big?", chat_response("x" * 8_000_000), line=11)  # more than the
    app = create_app(Settings(), build([*RECORDS, big]))  # kernel's buffers hold
    assert isinstance(app, ReplayApp)
    stats = app.replayer.stats
    with listening(app) as port:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(post(CHAT, chat("big?")) + post(CHAT, chat("count?")))
            wait_for(lambda: stats.requests == 2, timeout=10)  # both decided: count? waits
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_for(lambda: stats.undelivered == 1, timeout=10)  # (the reset is seen)
        answers = one_by_one(port, [post(CHAT, chat("count?"))])
    assert [content(a) for a in answers] == ["1"]
    assert stats.requests == 3 and stats.in_flight() == 0


def test_expect_100_continue_and_http_1_0() -> None:
    expecting = post(CHAT, chat("2+2?"), "expect: 100-continue")
    answers, _ = served(lambda port: one_by_one(port, [expecting]))
    assert answers[0].startswith(b"HTTP/1.1 100 Continue\r\n\r\n<then>HTTP/1.1 200 OK")
    old = post(CHAT, chat("2+2?")).replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1)
    answers, _ = served(lambda port: closed_after(port, [old]))
    assert b"\r\nconnection: close\r\n" in answers[0] and answers[1] == b"<closed>"


def test_an_answer_without_a_body_is_not_held_back() -> None:
    """A HEAD answer is a head alone: nothing follows it to leave with."""
    def talk(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            f = s.makefile("rb")
            s.sendall(b"HEAD /v1/models HTTP/1.1\r\nhost: test\r\n\r\n")
            head = b"".join(iter(f.readline, b"\r\n"))  # then no body, whatever its length
            s.sendall(REQUESTS[0])
            return [head, read_response(f)]

    answers, _ = served(talk)
    assert answers[0].startswith(b"HTTP/1.1 405 ") and b"content-length: " in answers[0]
    assert status_of(answers[1]) == 200


def test_a_client_that_leaves_mid_body_gets_nothing() -> None:
    def left_mid_body(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(REQUESTS[0][:-5])
            time.sleep(0.2)
        return one_by_one(port, [post(CHAT, chat("colors?"))])

    answers, app = served(left_mid_body)
    assert b'"content":"red"' in answers[0]  # the first sample: the one who left took none
    assert app.replayer.stats.requests == 2


def test_a_body_sent_slowly_is_answered_when_whole() -> None:
    def slowly(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            request = REQUESTS[11]
            for i in range(0, len(request), 40):
                s.sendall(request[i:i + 40])
                time.sleep(0.005)
            return [normal(read_response(s.makefile("rb")))]

    answers, _ = served(slowly)
    assert status_of(answers[0]) == 200 and b'" Paris."' in answers[0]


def test_a_slow_client_is_cut_off_mid_body() -> None:
    app = create_app(Settings(), build(RECORDS))
    with listening(app, read_timeout=0.3) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(REQUESTS[0][:-5])
        assert s.recv(100) == b""  # cut off, nothing sent
        assert isinstance(app, ReplayApp) and app.replayer.stats.requests == 1


@pytest.mark.slow
def test_a_connection_idle_for_the_keep_alive_timeout_is_closed() -> None:
    def busy_then_idle(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            f = s.makefile("rb")
            answers = []
            # busy for longer than the timeout, never idle for as long: kept open
            for request in [REQUESTS[0], REQUESTS[1], get("/health"), REQUESTS[11]]:
                s.sendall(request)
                answers.append(normal(read_response(f)))
                time.sleep(0.5)
            start = time.monotonic()
            assert s.recv(1) == b""  # then idle: closed
            assert time.monotonic() - start < 1
            return answers

    answers, _ = served(busy_then_idle, keep_alive=1)
    assert len(answers) == 4


READ_TIMEOUT = 1.0


def closed_within(s: socket.socket, since: float, seconds: float) -> None:
    """The server closes `s` (sending nothing) at most `seconds` after `since`."""
    s.settimeout(since + seconds + 1.5 - time.monotonic())
    try:
        assert s.recv(100) == b""
    except TimeoutError:
        raise AssertionError("the connection was held open") from None
    assert time.monotonic() - since < seconds + 1.5


@pytest.mark.slow
@pytest.mark.parametrize("after_an_answer", [True, False])
@pytest.mark.parametrize("trickle", [[b"\r\n"], [b"\r\n"] * 8, [b"\r\n", b"PO", b"ST /v1"],
                                     [bytes([c]) for c in b"GET /health HTTP/1.1"]],
                         ids=["one CRLF", "CRLFs", "request line", "request line, a byte a time"])
def test_stray_or_trickled_bytes_never_hold_a_connection(after_an_answer: bool,
                                                          trickle: list[bytes]) -> None:
    """A lone CRLF is no request (RFC 9112 2.2), and it must not stop both clocks: from the
    first byte on, a client has --read-timeout to send a whole request."""
    app = create_app(Settings(), build(RECORDS))
    with listening(app, read_timeout=READ_TIMEOUT, keep_alive=5) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        if after_an_answer:
            s.sendall(get("/health"))
            assert status_of(read_response(s.makefile("rb"))) == 200
            time.sleep(0.5)
        start = time.monotonic()
        try:
            for piece in trickle:
                s.sendall(piece)
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):  # cut off while trickling
            assert time.monotonic() - start < READ_TIMEOUT + 1.5
            return
        closed_within(s, start, READ_TIMEOUT)


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["in the headers", "in the body"])
def test_a_pipelined_request_left_unfinished_is_cut_off(cut: str) -> None:
    """The unfinished request began in the read that ended the one before: no byte comes
    after it to start its clock."""
    second = REQUESTS[0]
    second = second[:second.index(b"\r\n") + 2] if cut == "in the headers" else second[:-5]
    app = create_app(Settings(), build(RECORDS))
    with listening(app, read_timeout=READ_TIMEOUT, keep_alive=5) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        start = time.monotonic()
        s.sendall(REQUESTS[0] + second)
        assert status_of(read_response(s.makefile("rb"))) == 200
        closed_within(s, start, READ_TIMEOUT)


def test_stray_crlfs_between_requests_are_still_ignored() -> None:
    requests = [REQUESTS[0] + b"\r\n", b"\r\n" + get("/health"), REQUESTS[1]]
    answers, _ = served(lambda port: one_by_one(port, requests))
    assert [status_of(a) for a in answers] == [200, 200, 200]


TRAILER = ("authorization: Bearer sesame",)


@pytest.mark.slow
@pytest.mark.parametrize("request_", [
    post(CHAT, chat("2+2?"), chunks=2, trailers=TRAILER),
    post("/replay/reset", b"{}", chunks=1, trailers=TRAILER),
    post(CHAT, chat("2+2?"), "authorization: Bearer wrong", chunks=2, trailers=TRAILER),
], ids=["replay", "reset", "wrong header"])
@pytest.mark.parametrize("apart", [False, True], ids=["one send", "trailer later"])
def test_an_authorization_trailer_is_no_header(request_: bytes, apart: bool) -> None:
    """RFC 9110 6.5.1: a trailer field is not a header; whenever it arrives, it never
    stands in for the Authorization header (uvicorn's parser reports both alike)."""
    def talk(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            cut = request_.index(b"\r\n0\r\n") + 5 if apart else len(request_)
            s.sendall(request_[:cut])
            time.sleep(0.2)
            s.sendall(request_[cut:])
            return [read_response(s.makefile("rb"))]

    answers, app = served(talk, api_key="sesame")
    assert status_of(answers[0]) == 401
    assert app.replayer.stats.requests == 1
