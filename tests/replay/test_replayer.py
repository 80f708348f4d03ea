"""The replay service's request path (`Replayer.handle`): what a request gets, what it
moves and counts, and what is logged when it gets no saved generation."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import orjson
import pytest

from replay_server import errors
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.replay.replayer import Replayer
from replay_server.saved.record import Record, validate
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.wire.families import family_of
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    user,
)

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
                    instance: Any = None, **request: Any) -> Record:
    """A record of a streamed exchange: its frames and the body they add up to."""
    frames = frames_of(text, *texts)
    body = family_of(CHAT_PATH).aggregate("".join(frames).encode())
    return validate({"replay_record": 1, "endpoint": CHAT_PATH, "model": MODEL,
                     "request": {"model": MODEL, "messages": user("q"), **request},
                     "response": body,
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


def test_a_failed_request_uses_no_sample_and_counts_no_hit() -> None:
    """A batch whose first prompt has its sample chosen and whose second is a miss: the
    request fails whole, and the sample chosen for the first is neither used nor a hit
    (the cursor stays too: tests/index/test_index.py)."""
    r = replayer([completion_record("p", completion_response("a")),
                  completion_record("p", completion_response("b"), line=2)])
    with pytest.raises(errors.NoMatch, match="prompt 1 of 2"):
        r.handle(COMPLETION_PATH, orjson.dumps({"model": MODEL, "prompt": ["p", "missing"]}))
    assert r.stats.used == {} and r.stats.counts[MODEL]["hits"] == 0
    assert r.stats.counts[MODEL]["replay_no_match"] == 1


# ------------------------------------------------------------------ recorded frames


@pytest.mark.parametrize("streamed_first", [False, True])
@pytest.mark.parametrize("files", [1, 2])  # one instance of two exchanges, or two instances
def test_a_stream_gets_the_recorded_frames_of_its_generation(streamed_first: bool,
                                                             files: int) -> None:
    """A run recorded once unstreamed, once streamed: the same generation twice under one
    key. A streamed request gets the recorded frames byte for byte, whichever came first;
    a plain one gets a saved body."""
    streamed = streamed_record("Hello world", line=2 if not streamed_first else 1,
                               file="b.jsonl" if files == 2 else "saved.jsonl")
    plain = plain_twin(streamed, line=1 if not streamed_first else 2)
    r = replayer([streamed, plain] if streamed_first else [plain, streamed])
    for _ in range(3):  # the uniform case: stateless, any number of times
        assert ask(r, "q", stream=True) == joined(streamed)
    assert texts(ask(r, "q")) == ["Hello world"]
    assert r.stats.unused(MODEL) == 0


def test_a_prompt_saved_by_many_instances_is_used_whole_until_a_reset() -> None:
    """One generation saved by three instances (the greedy case): a hit uses all three
    samples, every hit after it changes nothing, and a reset forgets them all."""
    answer = chat_response("4")
    records = [chat_record("2+2?", answer, file=f"{i}.jsonl") for i in range(3)]
    records.append(chat_record("3+3?", chat_response("6"), file="other.jsonl"))
    r = replayer(records)
    assert r.stats.unused(MODEL) == 4
    for _ in range(2):
        assert texts(ask(r, "2+2?")) == ["4"]
        assert r.stats.unused(MODEL) == 1
    r.stats.reset()
    assert r.stats.unused(MODEL) == 4
    assert texts(ask(r, "2+2?")) == ["4"]
    assert r.stats.unused(MODEL) == 1


def test_n_streamed_samples_get_the_recording_of_those_samples() -> None:
    """n=2, two instances that saved the same two samples, the second recorded streamed."""
    streamed = streamed_record("Hi", "Hi", file="b.jsonl")
    assert streamed.response is not None
    plain = chat_record("q", {**streamed.response, "id": "chatcmpl-plain"}, file="a.jsonl")
    r = replayer([plain, streamed])
    assert ask(r, "q", n=2, stream=True) == joined(streamed)


def test_samples_served_one_by_one_get_the_recording_of_the_same_generation() -> None:
    """The cursor case: samples a (unstreamed), b, a (streamed), in saved order. Each call
    moves the cursor by one; a streamed call whose sample's generation was also recorded
    streamed gets those frames."""
    streamed = streamed_record("a", line=3)
    assert streamed.response is not None
    records = [plain_twin(streamed, line=1),
               chat_record("q", {**streamed.response, "id": "chatcmpl-b", "choices": [
                   {**streamed.response["choices"][0],
                    "message": {"role": "assistant", "content": "b"}}]}, line=2),
               streamed]
    r = replayer(records)
    assert ask(r, "q", stream=True) == joined(streamed)
    assert ask(r, "q", stream=True).startswith(b'data: {"id":"chatcmpl-b"')  # made up
    assert ask(r, "q", stream=True) == joined(streamed)
    with pytest.raises(errors.Exhausted):
        ask(r, "q", stream=True)
    assert r.stats.unused(MODEL) == 0


def test_strict_mode_sends_only_a_recording_saved_with_the_same_parameters() -> None:
    streamed = streamed_record("Hello world", line=2, temperature=1.0)
    assert streamed.response is not None
    plain = chat_record("q", {**streamed.response, "id": "chatcmpl-plain"}, line=1,
                        temperature=0.0)
    r = replayer([plain, streamed], Rules(strict=True))
    made_up = ask(r, "q", stream=True, temperature=0.0)
    assert made_up != joined(streamed) and made_up.startswith(b'data: {"id":"chatcmpl-plain"')
    assert ask(r, "q", stream=True, temperature=1.0) == joined(streamed)


def test_a_plain_request_still_gets_the_saved_sample_in_order() -> None:
    streamed = streamed_record("Hello world", line=1)
    r = replayer([streamed, plain_twin(streamed, line=2)])
    assert orjson.loads(ask(r, "q"))["id"] == "chatcmpl-recorded"


# ------------------------------------------------------------------ the log


def _logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "replay_server.replay.replayer"]


@pytest.mark.parametrize("body, code, model", [
    ({"model": MODEL, "messages": user("unsaved")}, "replay_no_match", MODEL),
    ({"model": "gpt-unknown", "messages": user("q")}, "404", "gpt-unknown"),
    ({"model": "gpt-unknown", "messages": "not a list"}, "400", "gpt-unknown"),
    ({"model": "alias", "messages": user("unsaved")}, "replay_no_match", "alias"),
])
def test_a_request_that_gets_no_saved_generation_is_logged_once_naming_its_model(
        caplog: pytest.LogCaptureFixture, body: dict[str, Any], code: str, model: str
) -> None:
    """One line, at one level (WARNING) whatever went wrong, naming the model the request
    asked for (an unknown one too)."""
    r = replayer([chat_record("q", chat_response("a"))], alias=MODEL)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(errors.ReplayServerError):
        r.handle(CHAT_PATH, orjson.dumps(body))
    [line] = _logged(caplog)
    assert line.levelno == logging.WARNING
    assert f"model={model} " in line.getMessage() and code in line.getMessage()


def test_only_replay_decisions_are_logged_as_replay_errors(
        caplog: pytest.LogCaptureFixture) -> None:
    """Through the app: a wrong method (405), an unknown route or model (404) is a request
    error; a miss is a replay error (one of the `replay_*` decisions). One level for all."""
    app = create_app(Settings(), build([chat_record("q", chat_response("a"))]))
    caplog.set_level(logging.DEBUG)

    async def send() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                     base_url="http://replay") as client:
            answers = [await client.get(CHAT_PATH), await client.post("/v1/nothing", json={}),
                       await client.post(CHAT_PATH, json={"model": "nope",
                                                          "messages": user("q")}),
                       await client.post(CHAT_PATH, json={"model": MODEL,
                                                          "messages": user("unsaved")})]
        return [a.status_code for a in answers]

    assert asyncio.run(send()) == [405, 404, 404, 400]
    lines = [line.getMessage() for line in _logged(caplog)]
    assert [m.split(" model=")[0] for m in lines] == [
        "request error 405", "request error 404", "request error 404",
        "replay error replay_no_match"]
    assert [m.split(" ")[3] for m in lines] == ["model=-", "model=-", "model=nope",
                                                f"model={MODEL}"]
    assert {line.levelno for line in _logged(caplog)} == {logging.WARNING}


def test_an_answered_request_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    r = replayer([chat_record("q", chat_response("a"))])
    caplog.set_level(logging.DEBUG)
    ask(r, "q")
    ask(r, "q", stream=True)
    assert _logged(caplog) == []


# ------------------------------------------------------------------ delivery


def take(r: Replayer, text: str) -> Any:
    """A chat request for `text` decided, its samples taken, not yet settled."""
    return r.take(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user(text)}))


def test_an_answer_never_delivered_gives_its_sample_back_first() -> None:
    """The samples of an answer that never left are taken meanwhile (a request decided
    before it settles gets the next one), then given back: the next request gets them
    before any later one, and they are counted neither used nor answered."""
    r = replayer([chat_record("q", chat_response("1", "2", "3"))])
    first, second = take(r, "q"), take(r, "q")
    assert [texts(first.body), texts(second.body)] == [["1"], ["2"]]
    r.settle(first, False)
    r.settle(second, True)
    assert texts(ask(r, "q")) == ["1"] and texts(ask(r, "q")) == ["3"]
    assert r.stats.undelivered == 1 and r.stats.answered == 3 and r.stats.unused(MODEL) == 0
    with pytest.raises(errors.Exhausted):
        ask(r, "q")


def test_an_answer_taken_before_a_reset_frees_nothing_after_it() -> None:
    r = replayer([chat_record("q", chat_response("1", "2"))])
    before = take(r, "q")
    r.reset()
    assert texts(ask(r, "q")) == ["1"]  # (the cursors start over)
    r.settle(before, False)  # its "1" is the one just served again: not freed twice
    assert texts(ask(r, "q")) == ["2"]
    r.settle(before, False)  # settled once
    assert r.stats.undelivered == 1


@pytest.mark.parametrize("body", [
    {"model": "judge", "input": "grade it", "previous_response_id": "resp_1"},  # not keyed
    {"model": "judge", "input": 7},  # not a request the family reads
])
def test_a_forwarded_request_that_cannot_be_keyed_is_retried_by_its_body(
        body: dict[str, Any]) -> None:
    """A judge's Responses call that continues a turn is keyed by the upstream's answer,
    not here: its retry (the same body) that got through recovers its 429, so `run` does
    not fail a judge that answered; another body recovers nothing."""
    r = replayer([chat_record("q", chat_response("a"))])
    sent = orjson.dumps(body)
    r.forwarded("/v1/responses", sent, "judge", "upstream_error", "HTTP 429")
    r.forwarded("/v1/responses", sent + b" ", "judge", "recorded", "")
    assert len(r.stats.forward_failures) == 1
    r.forwarded("/v1/responses", sent, "judge", "recorded", "")
    assert r.stats.forward_failures == {}
    assert [f.attempts for f in r.stats.forward_recovered.values()] == [1]
