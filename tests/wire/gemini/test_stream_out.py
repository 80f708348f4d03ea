"""A Gemini stream out: a saved response cut into chunks that add back up to it exactly,
in the framing the request asks for; a recorded stream sent as it was, or re-framed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from replay_server.wire.gemini.stream_in import aggregate
from replay_server.wire.gemini.stream_out import chunks_of, event, framed
from replay_server.wire.sse import cut
from tests.support import gemini_response

LONG = "The answer is 4, since two and two make four; it could be nothing else at all."


def with_parts(*parts: dict[str, Any], **candidate: Any) -> dict[str, Any]:
    body = gemini_response("x", **candidate)
    body["candidates"][0]["content"]["parts"] = list(parts)
    return body


BODIES = {
    "text": gemini_response(LONG),
    "thinking": with_parts({"text": LONG, "thought": True},
                           {"text": LONG, "thoughtSignature": "c2ln"}),
    "two-text-parts": with_parts({"text": LONG}, {"text": "And more."}, {"text": "Three."}),
    "calls": with_parts({"functionCall": {"name": "f", "args": {"b": 1, "a": 2}},
                         "thoughtSignature": "c2ln"}, {"functionCall": {"name": "g"}}),
    "code": with_parts({"executableCode": {"language": "PYTHON", "code": "print(4)"}},
                       {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "4"}},
                       {"text": LONG}),
    "candidates": gemini_response(LONG, "Four.", "4", safetyRatings=[{"category": "c"}]),
    "cut-before-any-text": {"candidates": [{"content": {"role": "model"}, "index": 0,
                                            "finishReason": "MAX_TOKENS"}],
                            "usageMetadata": {"promptTokenCount": 3}},
    "blocked": {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "m"},
    "no-usage": gemini_response(LONG, usage=None),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_chunks_add_up_to_the_saved_response(name: str) -> None:
    body = BODIES[name]
    chunks = chunks_of(body)
    assert aggregate(b"".join(event(c) for c in chunks)) == body
    assert all("usageMetadata" not in c for c in chunks[:-1])  # the usage on the last


def test_a_text_is_cut_into_chunks_of_a_few_tokens() -> None:
    chunks = chunks_of(BODIES["thinking"])
    assert len(chunks) > 6
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert [p for p in parts if "thoughtSignature" in p] == [parts[-1]]  # on the last piece
    assert all(c["modelVersion"] == "test/model" and c["responseId"] for c in chunks)
    assert "finishReason" in chunks[-1]["candidates"][0]
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])


def test_each_framing_is_sent_as_asked_and_re_framed_chunk_for_chunk() -> None:
    chunks = chunks_of(BODIES["calls"])
    events = b"".join(event(c) for c in chunks)
    assert framed({"alt": "sse"}, events) == (b"text/event-stream", events)  # as it was
    kind, as_array = framed({}, events)
    assert kind == b"application/json" and orjson.loads(as_array) == chunks
    assert framed({"alt": "json"}, as_array) == (kind, as_array)
    kind, again = framed({"alt": "sse"}, as_array)
    assert kind == b"text/event-stream" and [orjson.loads(f.removeprefix(b"data: "))
                                             for f in cut(again)] == chunks
