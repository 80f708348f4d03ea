"""listen.Direct: the replay POSTs answered straight from uvicorn's parser give the same
bytes, in the same order, with the same counting, as the ASGI path (`listen.DIRECT` off).
Raw sockets on a real uvicorn run as `serve` runs it (`listen.uvicorn_config`)."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import hypothesis
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from uvicorn.server import ServerState

from replay_server.paths import RESPONSES_PATH
from replay_server.saved.record import validate
from replay_server.settings import DEFAULT_READ_TIMEOUT, Settings
from replay_server.web import listen
from replay_server.web.app import Answer, ReplayApp, ReplayEndpoint, create_app
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    on_free_port,
    user,
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
]


def chat(text: str, **more: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": user(text), **more}


def post(path: str, body: Any, *headers: str, chunks: int = 0) -> bytes:
    """A POST as bytes; `chunks` > 0 sends the body chunked, in that many pieces."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    lines = [f"POST {path} HTTP/1.1", "host: test", "content-type: application/json",
             *headers]
    if not chunks:
        lines.append(f"content-length: {len(data)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + data
    lines.append("transfer-encoding: chunked")
    step = -(-len(data) // chunks)
    pieces = [data[i:i + step] for i in range(0, len(data), step)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
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
    post(CHAT + "?a=b", chat("2+2?")),  # a query string: ignored by both paths
    post(CHAT + "?a=b#c", chat("2+2?")),  # a fragment: the ASGI path either way
    post(CHAT + "%3Fa", chat("2+2?")),  # an escaped path: the ASGI path either way
    post(CHAT, chat("2+2?"), "connection: keep-alive", "x-extra: 1"),
]


@contextmanager
def listening(app: Any, read_timeout: float = DEFAULT_READ_TIMEOUT,
              keep_alive: float = 5) -> Iterator[int]:
    """uvicorn serving `app` as `serve` runs it, on a free port."""
    config = listen.uvicorn_config(app, "warning", False, read_timeout,
                                   timeout_keep_alive=keep_alive)
    try:
        with on_free_port(config) as port:
            yield port
    finally:
        listen.SlowClientProtocol.read_timeout = DEFAULT_READ_TIMEOUT


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


class Calls:
    """How many requests went through the ASGI endpoint (`ReplayEndpoint.__call__`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = ReplayEndpoint.__call__

        async def counted(endpoint: ReplayEndpoint, *args: Any) -> None:
            self.count += 1
            await original(endpoint, *args)

        monkeypatch.setattr(ReplayEndpoint, "__call__", counted)


def served(monkeypatch: pytest.MonkeyPatch, direct: bool,
           talk: Callable[[int], list[bytes]], keep_alive: float = 5, **settings: Any
           ) -> tuple[list[bytes], dict[str, Any], int]:
    """The answers `talk` gets from a fresh server, the server's status after, and how
    many requests went through the ASGI endpoint."""
    monkeypatch.setattr(listen, "DIRECT", direct)
    calls = Calls(monkeypatch)
    app = create_app(Settings(max_body_size=MAX_BODY, **settings), build(RECORDS))
    assert isinstance(app, ReplayApp)
    with listening(app, keep_alive=keep_alive) as port:
        answers = talk(port)
    status = app.replayer.status()
    del status["uptime_s"]
    status["requests"] = app.replayer.stats.requests
    monkeypatch.undo()
    return answers, status, calls.count


def same_both_ways(monkeypatch: pytest.MonkeyPatch, talk: Callable[[int], list[bytes]],
                   taken: bool = True, **settings: Any) -> tuple[list[bytes], int]:
    """Asserts the direct path answers as the ASGI path does (and takes some of the
    requests, unless not `taken`); the answers, and how many requests the direct server
    still sent through the ASGI endpoint."""
    asgi, asgi_status, asgi_calls = served(monkeypatch, False, talk, **settings)
    direct, direct_status, direct_calls = served(monkeypatch, True, talk, **settings)
    assert direct == asgi
    assert direct_status == asgi_status
    assert asgi_calls > direct_calls if taken else asgi_calls == direct_calls > 0
    return direct, direct_calls


def test_every_kind_of_answer_is_the_same_byte_for_byte(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers, calls = same_both_ways(monkeypatch, lambda port: one_by_one(port, REQUESTS))
    assert calls == 1  # the path with a fragment (the escaped one is FastAPI's 404)
    statuses = [int(a.split(b" ", 2)[1]) for a in answers]
    assert statuses == [200, 200, 200, 200, 400, 200, 200, 400, 400, 400, 200, 200, 200, 200,
                        200, 400, 400, 400, 400, 400, 404, 413, 413, 200, 200, 200, 404, 200]
    assert b"\r\ntransfer-encoding: chunked\r\n" in answers[1]
    assert answers[-1].startswith(b"HTTP/1.1 200 OK\r\ndate: -\r\nserver: uvicorn\r\n")


def test_pipelined_requests_are_answered_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [REQUESTS[0], get("/health"), REQUESTS[1], post(CHAT, chat("colors?")),
                get("/health"), REQUESTS[13], REQUESTS[21], post(CHAT, chat("colors?"))]
    answers, _ = same_both_ways(monkeypatch, lambda port: pipelined(port, requests))
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [
        b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 413 Request Entity Too Large",
        b"HTTP/1.1 200 OK"]
    assert b'"content":"red"' in answers[3] and b'"content":"blue"' in answers[7]


def test_every_request_pipelined(monkeypatch: pytest.MonkeyPatch) -> None:
    same_both_ways(monkeypatch, lambda port: pipelined(port, REQUESTS))


def test_a_connection_is_kept_alive_across_many_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [REQUESTS[i % 4] for i in range(200)] + [get("/health")]
    answers, calls = same_both_ways(monkeypatch, lambda port: one_by_one(port, requests))
    assert calls == 0 and len(answers) == 201


def test_the_api_key_is_checked_as_on_the_asgi_path(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [REQUESTS[0], post(CHAT, chat("2+2?"), "authorization: Bearer wrong"),
                post(CHAT, chat("2+2?"), "authorization: Bearer sesame"),
                post(RESPONSES_PATH, {"model": MODEL, "input": "hi"}),
                post(CHAT, chat("x" * MAX_BODY)), get("/health"), get("/v1/models")]
    answers, _ = same_both_ways(monkeypatch, lambda port: one_by_one(port, requests),
                                api_key="sesame")
    assert [a.split(b"\r\n", 1)[0][9:12] for a in answers] == [
        b"401", b"401", b"200", b"401", b"401", b"200", b"401"]


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


def test_connection_close_is_answered_then_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [REQUESTS[0], post(CHAT, chat("colors?"), "connection: close"),
                post(CHAT, chat("colors?"))]  # after the close: never answered, nor counted
    answers, _ = same_both_ways(monkeypatch, lambda port: closed_after(port, requests))
    assert len(answers) == 3 and answers[-1] == b"<closed>"
    assert b"\r\nconnection: close\r\n" in answers[1]


def left_mid_body(port: int) -> list[bytes]:
    """A client that leaves halfway through a body; then another asks."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(REQUESTS[0][:-5])
        time.sleep(0.2)
    return one_by_one(port, [post(CHAT, chat("colors?"))])


def test_a_client_that_leaves_mid_body_gets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    answers, _ = same_both_ways(monkeypatch, left_mid_body)
    assert b'"content":"red"' in answers[0]


def test_a_body_sent_slowly_is_answered_when_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    def slowly(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            request = REQUESTS[11]
            for i in range(0, len(request), 40):
                s.sendall(request[i:i + 40])
                time.sleep(0.005)
            return [normal(read_response(s.makefile("rb")))]

    same_both_ways(monkeypatch, slowly)


def test_a_slow_client_is_cut_off_mid_body(monkeypatch: pytest.MonkeyPatch) -> None:
    for direct in (False, True):
        monkeypatch.setattr(listen, "DIRECT", direct)
        app = create_app(Settings(), build(RECORDS))
        with listening(app, read_timeout=0.3) as port, \
                socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(REQUESTS[0][:-5])
            assert s.recv(100) == b""  # cut off, nothing sent
            assert isinstance(app, ReplayApp) and app.replayer.stats.requests == 1


def test_other_apps_go_through_asgi(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    app = create_app(Settings(), build(RECORDS))

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        await app(scope, receive, send)

    with listening(wrapped) as port:
        assert one_by_one(port, [REQUESTS[0]])[0].startswith(b"HTTP/1.1 200 OK")
    assert calls.count == 1


@pytest.mark.parametrize("unusual", ["", "access_log", "limit_concurrency", "root_path",
                                     "switch"])
def test_a_connection_is_answered_directly_only_as_usual(
        monkeypatch: pytest.MonkeyPatch, unusual: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        config = listen.uvicorn_config(create_app(Settings(), build(RECORDS)), "warning",
                                       False)
        protocol = listen.SlowClientProtocol(config, ServerState(), {}, _loop=loop)
        if unusual == "switch":
            monkeypatch.setattr(listen, "DIRECT", False)
        elif unusual:
            setattr(protocol, unusual, {"access_log": True, "limit_concurrency": 10,
                                        "root_path": "/api"}[unusual])
        direct = listen.Direct.of(protocol, listen.OneSend(None, loop))  # type: ignore[arg-type]
        assert (direct is None) == bool(unusual)
    finally:
        loop.close()


class Written:
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def uvicorns_bytes(defaults: list[tuple[bytes, bytes]], answer: Answer,
                   keep_alive: bool) -> bytes:
    """What uvicorn's own cycle writes for `answer` as ReplayEndpoint sends it."""
    status, headers, body = answer
    written = Written()

    async def send() -> None:
        cycle = RequestResponseCycle(
            scope={"method": "POST"},  # type: ignore[typeddict-item]
            transport=written,  # type: ignore[arg-type]
            flow=FlowControl(written),  # type: ignore[arg-type]
            logger=logging.getLogger("test"), access_logger=logging.getLogger("test"),
            access_log=False, default_headers=defaults, message_event=asyncio.Event(),
            expect_100_continue=False, keep_alive=keep_alive, on_response=lambda: None)
        await cycle.send({"type": "http.response.start", "status": status,
                          "headers": headers})
        await cycle.send({"type": "http.response.body", "body": body})

    asyncio.run(send())
    return written.data


TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=1,
                max_size=12).map(str.encode)
VALUE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(
    str.encode)


@given(status=st.sampled_from([200, 400, 401, 404, 413, 500, 502]),
       headers=st.lists(st.tuples(TOKEN, VALUE), max_size=4),
       body=st.binary(max_size=300), sized=st.booleans(), keep_alive=st.booleans(),
       date=VALUE)
@hypothesis.settings(max_examples=300, deadline=None)
def test_the_direct_bytes_are_uvicorns(status: int, headers: list[tuple[bytes, bytes]],
                                       body: bytes, sized: bool, keep_alive: bool,
                                       date: bytes) -> None:
    headers = [(name, value) for name, value in headers
               if name.lower() not in (b"content-length", b"transfer-encoding", b"connection")]
    if sized:
        headers.insert(len(headers) // 2, (b"content-length", str(len(body)).encode()))
    defaults = [(b"date", date), (b"server", b"uvicorn")]
    answer = (status, headers, body)
    assert listen.wire(defaults, answer, keep_alive) == \
        uvicorns_bytes(defaults, answer, keep_alive)


@pytest.mark.parametrize("header", [(b"x-bad", b"a\nb"), (b"bad name", b"x"),
                                    (b"content-length", b"3"), (b"connection", b"close"),
                                    (b"transfer-encoding", b"chunked")])
def test_an_answer_uvicorn_would_refuse_is_refused(header: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError):
        listen.wire([(b"date", b"x")], (200, [header], b"{}"), True)


def test_an_answer_uvicorn_would_refuse_closes_and_nothing_after_it_runs(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    finish = ReplayEndpoint.finish

    def refused_or_not(endpoint: ReplayEndpoint, body: bytes) -> Answer:
        if b"colors?" in body:
            return 200, [(b"x-bad", b"a\nb")], b"{}"
        return finish(endpoint, body)

    def patched(port: int) -> list[bytes]:
        monkeypatch.setattr(ReplayEndpoint, "finish", refused_or_not)
        return closed_after(port, [REQUESTS[0], post(CHAT, chat("colors?")), REQUESTS[0]])

    answers, _ = same_both_ways(monkeypatch, patched)
    assert len(answers) == 2 and answers[-1] == b"<closed>"


def test_unusual_requests_go_through_asgi(monkeypatch: pytest.MonkeyPatch) -> None:
    expecting = post(CHAT, chat("2+2?"), "expect: 100-continue")
    answers, _ = same_both_ways(monkeypatch, lambda port: one_by_one(port, [expecting]),
                                taken=False)
    assert answers[0].startswith(b"HTTP/1.1 100 Continue\r\n\r\n<then>HTTP/1.1 200 OK")
    old = post(CHAT, chat("2+2?")).replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1)
    answers, _ = same_both_ways(monkeypatch, lambda port: closed_after(port, [old]),
                                taken=False)
    assert b"\r\nconnection: close\r\n" in answers[0] and answers[1] == b"<closed>"


def test_a_connection_idle_for_the_keep_alive_timeout_is_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def busy_then_idle(port: int) -> list[bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            f = s.makefile("rb")
            answers = []
            # busy for longer than the timeout, never idle for as long: kept open
            for request in [REQUESTS[0], REQUESTS[1], get("/health"), REQUESTS[11]]:
                s.sendall(request)
                answers.append(normal(read_response(f)))
                time.sleep(0.5)
            assert s.recv(1) == b""  # then idle: closed
            return answers

    answers, calls = same_both_ways(monkeypatch, busy_then_idle, keep_alive=1)
    assert len(answers) == 4 and calls == 0
