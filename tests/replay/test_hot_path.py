"""The request path's shortcuts give what the general code gives: the fast type check
(`protocol._types_ok`) passes only what the precise one (`_check_types`) passes; one
whole saved exchange served by `Replayer._whole` is the reply, counters and samples used
that the general path (`samples.choose`, `replies`, `streams`) gives; a body received in
one ASGI message is what the same body in several gives, limits and disconnects too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message

from replay_server.errors import BadRequest, ReplayServerError
from replay_server.index.loading import load
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH
from replay_server.replay.replayer import Replayer, Reply
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.wire import protocol

ROOT = Path(__file__).resolve().parents[2]
# chat and completions (a two-sample entry among them), and Responses exchanges that
# inspect_ai's openai client sent and the fake model answered
DEMO = ROOT / "examples" / "demo-run.jsonl"
WIRE = ROOT / "tests" / "data" / "inspect_ai" / "responses" / "wire.jsonl"

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.floats(allow_nan=False,
                                                                            allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=6)


def _precise_passes(data: dict[str, Any], endpoint: str) -> bool:
    try:
        protocol._check_types(data, endpoint)
    except BadRequest:
        return False
    return True


@pytest.mark.parametrize("endpoint", [CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_fast_type_check_agrees_with_the_precise_one(endpoint: str, data: Any) -> None:
    names = sorted(protocol._TYPES[endpoint]) + ["unknown_field"]
    body = data.draw(st.dictionaries(st.sampled_from(names), JSON, max_size=6))
    parsed = orjson.loads(orjson.dumps(body))  # what a request body parses to
    assert protocol._types_ok(parsed, endpoint) == _precise_passes(parsed, endpoint)


@pytest.fixture
def saved(tmp_path: Path) -> list[Path]:
    responses = tmp_path / "responses.jsonl"
    with responses.open("wb") as out:
        for line in WIRE.read_bytes().splitlines():
            wire = orjson.loads(line)
            out.write(orjson.dumps({"replay_record": 1, "endpoint": wire["path"],
                                    "model": wire["request"]["model"],
                                    "request": wire["request"], "response": wire["response"]})
                      + b"\n")
    return [DEMO, responses]


def _requests(saved: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in saved:
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            out.append((record["endpoint"], record["request"]))
    return out


def _serve(saved: list[Path], general: bool, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[list[Reply | tuple[int, str]], Replayer]:
    replayer = Replayer(load(saved, progress=False).index, Rules())
    if general:
        monkeypatch.setattr(replayer, "_lone", lambda run, request: None)
    out: list[Reply | tuple[int, str]] = []
    for endpoint, request in _requests(saved):
        for stream in (False, True):
            for repeat in range(2):
                body = {**request, "stream": stream, "metadata": {"repeat": repeat}}
                if not stream:
                    body.pop("stream_options", None)
                try:
                    out.append(replayer.handle(endpoint, orjson.dumps(body)))
                except ReplayServerError as error:
                    out.append((error.status, error.message))
    return out, replayer


def test_one_whole_exchange_is_served_as_the_general_path_serves_it(
        saved: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fast, fast_replayer = _serve(saved, False, monkeypatch)
    general, general_replayer = _serve(saved, True, monkeypatch)
    assert sum(isinstance(r, Reply) for r in fast) >= 20  # chat, completions, responses
    assert fast == general
    assert fast_replayer.stats.per_model() == general_replayer.stats.per_model()
    assert fast_replayer.stats.used == general_replayer.stats.used
    assert fast_replayer.stats.rejected == general_replayer.stats.rejected


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
    request = next(r for e, r in _requests([DEMO]) if e == CHAT_PATH)
    return orjson.dumps(request)


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
