"""The stream relay: a recorded stream reaches the client as it arrives, and one the client
leaves or the upstream breaks is counted, not saved."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from replay_server.paths import CHAT_PATH
from replay_server.saved.writer import RecordWriter
from replay_server.web.recorder import Recorder, create_record_app
from tests.support import running, wait_for
from tests.web.test_recorder import question

pytestmark = pytest.mark.http


def staged_upstream(release: threading.Event, die: bool = False) -> Starlette:
    """An upstream that streams one chunk, then waits for `release` before the rest (or,
    with `die`, breaks the connection instead of finishing)."""
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"},
                          "finish_reason": None}]}

    async def chat(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            await asyncio.to_thread(release.wait, 30)
            if die:
                raise RuntimeError("upstream died mid-stream")
            done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            yield b"data: " + orjson.dumps(done) + b"\n\ndata: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route(CHAT_PATH, chat, methods=["POST"])])


STREAM = {"model": "m", "messages": question(1), "stream": True}


def test_a_stream_reaches_the_client_as_it_arrives(tmp_path: Path) -> None:
    """The upstream sends one chunk and then waits: the client must already have it."""
    release = threading.Event()
    with running(staged_upstream(release)) as up:
        rec = Recorder(up, RecordWriter(tmp_path / "slow.jsonl"))
        with running(create_record_app(rec)) as url, \
                httpx.stream("POST", url + "/chat/completions", json=STREAM, timeout=20) as s:
            chunks = s.iter_raw()
            first = next(chunks)
            assert b'"content":"Hi"' in first and not release.is_set()
            release.set()
            rest = b"".join(chunks)
        rec.writer.close()
    assert rest.endswith(b"data: [DONE]\n\n")
    saved = orjson.loads((tmp_path / "slow.jsonl").read_bytes())
    assert saved["response"]["choices"][0]["message"]["content"] == "Hi"
    assert saved["response"]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("who", ["client leaves", "upstream dies"])
def test_aborted_streams_are_counted_not_recorded(tmp_path: Path, who: str) -> None:
    release = threading.Event()
    with running(staged_upstream(release, die=who == "upstream dies")) as up:
        rec = Recorder(up, RecordWriter(tmp_path / "aborted.jsonl"))
        with running(create_record_app(rec)) as url:
            with httpx.stream("POST", url + "/chat/completions", json=STREAM, timeout=20) as s:
                chunks = s.iter_raw()
                assert b"Hi" in next(chunks)
                if who == "upstream dies":
                    release.set()
                    with pytest.raises(httpx.HTTPError):
                        b"".join(chunks)
            # a client that leaves is noticed while the upstream still holds its stream
            counted = "abandoned" if who == "client leaves" else "aborted"
            wait_for(lambda: rec.counts[counted] == 1)
            release.set()
        rec.writer.close()
    assert (tmp_path / "aborted.jsonl").read_bytes() == b""
