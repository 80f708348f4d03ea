"""A replay endpoint receives its body as ASGI messages: in one message or several, over
the size limit without a Content-Length, or cut short by a client that leaves; and under
--api-key, a key where each API's clients send it (Google's: `x-goog-api-key`, `?key=`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from google import genai
from google.genai import errors, types
from starlette.types import Message

from replay_server.index.loading import load
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH
from replay_server.replay.replayer import Replayer
from replay_server.replay.state import shared
from replay_server.settings import Settings
from replay_server.web.app import create_app
from tests.parts import redis_server
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    gemini_contents,
    gemini_record,
    gemini_response,
    running,
    user,
)

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


GEMINI = "gemini-saved"
GEMINI_ASK = {"contents": gemini_contents("What is 2 + 2?")}


@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    """A server started with --api-key, one Gemini answer saved: its root URL."""
    records = [gemini_record("What is 2 + 2?", gemini_response("4"), model=GEMINI)]
    with running(create_app(Settings(api_key="s3cret"), build(records))) as url:
        yield url.removesuffix("/v1")


def google(root: str, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=root))


@pytest.mark.http
def test_googles_clients_are_let_in_by_the_key_where_they_send_it(keyed: str) -> None:
    """google-genai sends the key as `x-goog-api-key`; a REST client may send `?key=`."""
    with google(keyed, "s3cret") as client:
        assert client.models.generate_content(model=GEMINI, contents="What is 2 + 2?").text \
            == "4"
        assert [m.name for m in client.models.list()] == [f"models/{GEMINI}"]
    path = f"{keyed}/v1beta/models/{GEMINI}:generateContent"
    assert httpx.post(f"{path}?key=s3cret", json=GEMINI_ASK).status_code == 200
    assert httpx.get(f"{keyed}/v1beta/models?key=s3cret").status_code == 200


@pytest.mark.http
def test_a_wrong_google_key_is_a_401_in_googles_envelope(keyed: str) -> None:
    with google(keyed, "wrong") as client, pytest.raises(errors.ClientError) as e:
        client.models.generate_content(model=GEMINI, contents="What is 2 + 2?")
    assert (e.value.code, e.value.status) == (401, "UNAUTHENTICATED")
    assert e.value.message and "`x-goog-api-key: KEY`" in e.value.message
    path = f"{keyed}/v1beta/models/{GEMINI}:generateContent"
    for refused in (httpx.post(f"{path}?key=wrong", json=GEMINI_ASK),
                    httpx.post(path, json=GEMINI_ASK),  # no key at all
                    # the first credential decides: a header before the query
                    httpx.post(f"{path}?key=s3cret", json=GEMINI_ASK,
                               headers={"x-goog-api-key": "wrong"})):
        assert refused.status_code == 401
        assert refused.json()["error"]["status"] == "UNAUTHENTICATED"


@pytest.mark.http
@pytest.mark.slow
def test_a_sample_on_its_way_on_another_replica_is_waited_for(tmp_path: Path) -> None:
    """With a shared state, every sample of a prompt taken but one only promised to an
    answer on its way on another replica: the request waits (without holding the server)
    rather than being refused as exhausted, and gets that sample once it is given back."""
    records = [chat_record("q", chat_response("1", "2"))]
    body = orjson.dumps({"model": MODEL, "messages": user("q")})
    got: list[str] = []
    with redis_server.running(tmp_path) as store:
        app = create_app(Settings(state=store.url), build(records))
        other = Replayer(build(records), Rules(), state=shared(build(records), store.url,
                                                               store.url))
        try:
            on_its_way = other.take(CHAT_PATH, body)  # "1", not yet delivered
            with running(app) as url, openai.OpenAI(base_url=url, api_key="x",
                                                    max_retries=0) as client:
                def ask() -> None:
                    reply = client.chat.completions.create(model=MODEL, messages=user("q"))
                    got.append(str(reply.choices[0].message.content))

                ask()
                waiting = threading.Thread(target=ask)
                waiting.start()
                replayer = app.state.replayer
                while replayer.current().requests < 2:  # (it reached the server)
                    waiting.join(0.01)
                assert got == ["2"] and waiting.is_alive()
                other.settle(on_its_way, False)  # the client left: "1" comes back
                waiting.join(30)
        finally:
            other.state.close()
    assert got == ["2", "1"]
