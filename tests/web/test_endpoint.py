"""A replay endpoint receives its body as ASGI messages: in one message or several, over
the size limit without a Content-Length, or cut short by a client that leaves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.types import Message

from replay_server.index.loading import load
from replay_server.paths import CHAT_PATH
from replay_server.settings import Settings
from replay_server.web.app import create_app

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo-run.jsonl"


def _asgi(messages: list[Message], headers: list[tuple[bytes, bytes]],
          max_body: int = 10_000) -> tuple[list[Message], Any]:
    """POST /v1/chat/completions through the app, the body as these ASGI messages."""
    app = create_app(Settings(max_body_size=max_body), load([DEMO], progress=False).index)
    sent: list[Message] = []
    pending = list(messages)

    async def receive() -> Message:
        return pending.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": CHAT_PATH, "query_string": b"",
             "headers": headers}
    asyncio.run(app(scope, receive, send))
    return sent, app.state.replayer.stats


def _chat_body() -> bytes:
    for line in DEMO.read_bytes().splitlines():
        record = orjson.loads(line)
        if record["endpoint"] == CHAT_PATH:
            return orjson.dumps(record["request"])
    raise AssertionError("the demo run has no chat record")


@pytest.mark.parametrize("pieces", [1, 2, 5])
def test_a_body_in_one_message_or_several_gets_the_same_answer(pieces: int) -> None:
    body = _chat_body()
    cut = [body[i * len(body) // pieces:(i + 1) * len(body) // pieces] for i in range(pieces)]
    messages: list[Message] = [{"type": "http.request", "body": c, "more_body": i < pieces - 1}
                               for i, c in enumerate(cut)]
    sent, stats = _asgi(messages, [(b"content-length", b"%d" % len(body))])
    whole, _ = _asgi([{"type": "http.request", "body": body}], [])
    assert sent == whole and sent[0]["status"] == 200 and stats.requests == 1


@pytest.mark.parametrize("pieces", [1, 3])
def test_a_body_over_the_limit_without_a_length_is_413_and_counted(pieces: int) -> None:
    body = _chat_body()
    messages: list[Message] = [{"type": "http.request", "body": body,
                                "more_body": i < pieces - 1} for i in range(pieces)]
    sent, stats = _asgi(messages, [], max_body=len(body) * pieces - 1)
    assert sent[0]["status"] == 413 and stats.rejected == {"413": 1}
    assert f"{len(body) * pieces} bytes or more" in orjson.loads(sent[1]["body"])[
        "error"]["message"]


@pytest.mark.parametrize("first", [True, False])
def test_a_client_that_leaves_mid_body_gets_nothing(first: bool) -> None:
    leave = {"type": "http.disconnect"}
    start: list[Message] = [] if first else [
        {"type": "http.request", "body": b"{", "more_body": True}]
    sent, stats = _asgi([*start, leave], [])
    assert sent == [] and stats.requests == 1 and not stats.rejected
