"""SIGTERM drains what is in flight, for `serve` and `record`, before the process exits."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from .support import chat_record, chat_response, running, user, write_jsonl
from .test_record import STREAM, staged_upstream

pytestmark = pytest.mark.http
ROOT = Path(__file__).parent.parent


def start(*argv: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "replay_server", *argv, "--port", "0"],
                            cwd=ROOT, text=True, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    for line in proc.stderr:
        if found := re.search(r"ready on (http://\S+)/v1", line):
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1)
    proc.wait()
    proc.stderr.close()
    raise AssertionError("did not start")


def finish(proc: subprocess.Popen[str]) -> int:
    code = proc.wait(30)
    assert proc.stderr is not None
    proc.stderr.close()
    return code


def test_serve_answers_a_request_in_flight_when_sigterm_comes(tmp_path: Path) -> None:
    saved = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a"))])
    proc, url = start("serve", str(saved), "--log-level", "warning")
    host, port = url.removeprefix("http://").split(":")
    body = orjson.dumps({"model": "test/model", "messages": user("q")})
    conn = socket.create_connection((host, int(port)))
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
    time.sleep(1)  # let the server read the head of the request before the signal
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    conn.sendall(body[10:])
    reply = b""
    while chunk := conn.recv(65536):
        reply += chunk
    conn.close()
    assert reply.startswith(b"HTTP/1.1 200")
    assert orjson.loads(reply.split(b"\r\n\r\n", 1)[1])["choices"][0]["message"]["content"] \
        == "a"
    assert finish(proc) in (0, -signal.SIGTERM)
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=2)


def test_record_finishes_and_saves_a_stream_in_flight_when_sigterm_comes(
        tmp_path: Path) -> None:
    release = threading.Event()
    out = tmp_path / "run.jsonl"
    with running(staged_upstream(release)) as upstream:
        proc, url = start("record", "--upstream", upstream, "--out", str(out),
                          "--log-level", "warning")
        with httpx.stream("POST", url + "/v1/chat/completions", json=STREAM,
                          timeout=30) as stream:
            chunks = stream.iter_raw()
            assert b"Hi" in next(chunks)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            release.set()
            rest = b"".join(chunks)
        assert rest.endswith(b"data: [DONE]\n\n")
        assert finish(proc) in (0, -signal.SIGTERM)
    saved = orjson.loads(out.read_bytes())
    assert saved["response"]["choices"][0]["message"]["content"] == "Hi"
