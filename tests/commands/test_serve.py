"""SIGTERM drains what is in flight, for `serve` and `record`, before the process exits."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support import chat_record, chat_response, running, spawn, user, write_jsonl
from tests.web.test_relay import STREAM, staged_upstream

pytestmark = pytest.mark.http


@pytest.mark.slow
def test_serve_answers_a_request_in_flight_when_sigterm_comes(tmp_path: Path) -> None:
    saved = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a"))])
    with spawn("serve", str(saved), "--log-level", "warning") as server:
        host, port = server.base.removeprefix("http://").split(":")
        body = orjson.dumps({"model": "test/model", "messages": user("q")})
        with socket.create_connection((host, int(port))) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                         + body[:10])
            time.sleep(1)  # let the server read the head of the request before the signal
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            conn.sendall(body[10:])
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200")
        answer = orjson.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert answer["choices"][0]["message"]["content"] == "a"
        assert server.wait() in (0, -signal.SIGTERM)
    with pytest.raises(httpx.HTTPError):
        httpx.get(server.base + "/health", timeout=2)


@pytest.mark.slow
def test_record_finishes_and_saves_a_stream_in_flight_when_sigterm_comes(
        tmp_path: Path) -> None:
    release = threading.Event()
    out = tmp_path / "run.jsonl"
    with running(staged_upstream(release)) as upstream:
        with spawn("record", "--upstream", upstream, "--out", str(out), "--log-level",
                   "warning") as recording, \
                httpx.stream("POST", recording.url + "/chat/completions", json=STREAM,
                             timeout=30) as stream:
            chunks = stream.iter_raw()
            assert b"Hi" in next(chunks)
            recording.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            release.set()
            rest = b"".join(chunks)
            assert rest.endswith(b"data: [DONE]\n\n")
            assert recording.wait() in (0, -signal.SIGTERM)
    saved = orjson.loads(out.read_bytes())
    assert saved["response"]["choices"][0]["message"]["content"] == "Hi"
