"""The replay service's request path (`Replayer.handle`): what a request gets, what it
moves and counts."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from replay_server import errors
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH
from replay_server.replay.replayer import Replayer
from replay_server.saved.record import Record, validate
from replay_server.wire import aggregate
from tests.support import MODEL, build, chat_record, chat_response, user

LOOSE = Rules()


def replayer(records: list[Record], rules: Rules = LOOSE, **aliases: str) -> Replayer:
    return Replayer(build(records, **aliases), rules)


def ask(r: Replayer, text: str, **request: Any) -> bytes:
    """The reply body to a chat request for `text` (a streamed request: its frames)."""
    return r.handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user(text),
                                             **request})).body


def texts(body: bytes) -> list[str]:
    return [c["message"]["content"] for c in orjson.loads(body)["choices"]]


def frames_of(*texts: str, chunk_id: str = "chatcmpl-recorded") -> list[str]:
    """A recorded chat stream: one delta per choice with its whole text (never what the
    server makes up from a body, which is many small deltas), then [DONE]."""
    envelope = {"id": chunk_id, "object": "chat.completion.chunk", "created": 7,
                "model": MODEL}
    chunks = [{**envelope, "choices": [{"index": i, "delta": {"role": "assistant",
                                                              "content": text},
                                        "finish_reason": None}]}
              for i, text in enumerate(texts)]
    chunks += [{**envelope, "choices": [{"index": i, "delta": {}, "finish_reason": "stop"}]}
               for i in range(len(texts))]
    return [f"data: {orjson.dumps(c).decode()}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


def streamed_record(text: str, *texts: str, line: int = 1, file: str = "saved.jsonl",
                    instance: Any = None) -> Record:
    """A record of a streamed exchange: its frames and the body they add up to."""
    frames = frames_of(text, *texts)
    body = aggregate.whole("".join(frames).encode(), True)
    return validate({"replay_record": 1, "endpoint": CHAT_PATH, "model": MODEL,
                     "request": {"model": MODEL, "messages": user("q")}, "response": body,
                     "stream": frames,
                     "source": {"file": file, "line": line, "instance": instance}}, file, line)


def plain_twin(record: Record, line: int, file: str = "saved.jsonl") -> Record:
    """The same generation saved unstreamed (another exchange: another id)."""
    assert record.response is not None
    return chat_record("q", {**record.response, "id": "chatcmpl-plain"}, line=line, file=file)


def joined(record: Record) -> bytes:
    assert record.stream is not None
    return "".join(record.stream).encode()


# ------------------------------------------------------------------ a failed request


def test_a_stream_that_cannot_be_served_moves_no_cursor() -> None:
    """Saved frames that do not add up to their body fail at request time: that failure
    comes before the repeats cursor moves, so the next call gets sample 1, not sample 2.
    (The record is made as a reader could not make it once frames are checked when
    loaded: a test of the request path, however such an exchange got in.)"""
    bad = dataclasses.replace(chat_record("q", chat_response("a"), line=1),
                              stream=frames_of("not a"))
    r = replayer([bad, chat_record("q", chat_response("b"), line=2)])
    with pytest.raises(errors.Unusable, match="saved stream"):
        ask(r, "q", stream=True)
    assert texts(ask(r, "q")) == ["a"]
    assert texts(ask(r, "q")) == ["b"]


def test_a_failed_request_uses_no_sample_and_counts_no_hit() -> None:
    bad = dataclasses.replace(chat_record("q", chat_response("a"), line=1),
                              stream=frames_of("not a"))
    r = replayer([bad, chat_record("q", chat_response("b"), line=2)])
    with pytest.raises(errors.Unusable):
        ask(r, "q", stream=True)
    assert r.stats.used == {} and r.stats.counts[MODEL]["hits"] == 0
    assert r.stats.counts[MODEL]["replay_unusable"] == 1
