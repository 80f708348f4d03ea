"""A Gemini stream in, in either framing, cut anywhere: the response a plain request gets,
built as the API's chunks add up (text pieces joined into their part, a signature closing
it; candidates by index; the last usage); what is no answer is a StreamError."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from replay_server.wire.gemini.stream_in import GeminiStreamAggregator, aggregate
from replay_server.wire.sse import StreamError
from tests.fakemodel.gemini_bodies import chunks as fake_chunks
from tests.support import gemini_response

SIG = "c2ln"


def sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)


def array(chunks: list[dict[str, Any]]) -> bytes:
    """The REST API's framing without alt=sse: indented chunks in one JSON array."""
    return ("[" + "\n,\r\n".join(json.dumps(c, indent=2) for c in chunks) + "\n]").encode()


def part_chunk(*parts: dict[str, Any], index: int = 0, **more: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"parts": list(parts), "role": "model"},
                            "index": index, **more}], "modelVersion": "m", "responseId": "r"}


CHUNKS = [
    part_chunk({"text": "I think", "thought": True}),
    part_chunk({"text": " hard.", "thought": True}),
    part_chunk({"text": "The answer"}),
    part_chunk({"text": " is 4.", "thoughtSignature": SIG}),
    part_chunk({"text": "Another part."}),
    part_chunk({"functionCall": {"name": "f", "args": {}}}, finishReason="STOP"),
    {**part_chunk({"text": ""}), "usageMetadata": {"promptTokenCount": 3,
                                                    "totalTokenCount": 9}},
]
WHOLE = {"candidates": [{"content": {"parts": [
    {"text": "I think hard.", "thought": True},
    {"text": "The answer is 4.", "thoughtSignature": SIG},
    {"text": "Another part."},
    {"functionCall": {"name": "f", "args": {}}},
    {"text": ""}], "role": "model"}, "index": 0, "finishReason": "STOP"}],
    "modelVersion": "m", "responseId": "r", "usageMetadata": {"promptTokenCount": 3,
                                                             "totalTokenCount": 9}}


@pytest.mark.parametrize("frame", [sse, array])
def test_chunks_add_up_to_the_whole_response(frame: Any) -> None:
    stream = frame(CHUNKS)
    assert aggregate(stream) == WHOLE
    assert aggregate([stream[i:i + 1] for i in range(len(stream))]) == WHOLE  # cut anywhere


def test_candidates_come_by_index() -> None:
    chunks = [part_chunk({"text": "b"}, index=1, finishReason="STOP"),
              part_chunk({"text": "a"}), part_chunk({"text": "!"}, finishReason="STOP")]
    got = aggregate(sse(chunks))
    assert [c["index"] for c in got["candidates"]] == [0, 1]
    assert got["candidates"][0]["content"]["parts"] == [{"text": "a!"}]


def test_the_fakes_streams_add_up_to_its_answers() -> None:
    """The test model's Gemini-shaped server streams as Google's API does (a few tokens a
    chunk, the signature on a part's last piece, the finishReason and usage last)."""
    answer = gemini_response("The answer is twelve, as twelve is 5 + 7 exactly.",
                             "Sure! The answer is 12.", safetyRatings=[])
    answer["candidates"][0]["content"]["parts"].insert(
        0, {"text": "I work it out step by step.", "thought": True})
    answer["candidates"][0]["content"]["parts"][1]["thoughtSignature"] = SIG
    chunks = fake_chunks(answer)
    assert len(chunks) > 4
    assert aggregate(sse(chunks)) == aggregate(array(chunks)) == answer


def test_an_array_is_whole_at_its_closing_bracket() -> None:
    stream = array(CHUNKS)
    aggregator = GeminiStreamAggregator()
    assert not aggregator.feed(stream[:-1])
    assert aggregator.feed(stream[-1:]) and aggregator.result() == WHOLE


@pytest.mark.parametrize(("stream", "says"), [
    (array(CHUNKS)[:-3], "cut short"),
    (b"[1, 2]", "not a response object"),
    (sse([{"error": {"code": 500, "message": "boom"}}]), "carried an error"),
    (b"data: {not json\r\n\r\n", "not JSON"),
    (b"", "no response"),
    (b"[]", "no response"),
    (sse([{"candidates": [{"index": "0"}]}]), "integer `index`"),
])
def test_a_stream_that_is_no_answer_is_a_stream_error(stream: bytes, says: str) -> None:
    with pytest.raises(StreamError, match=says):
        aggregate(stream)
