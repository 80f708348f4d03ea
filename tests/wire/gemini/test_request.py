"""What a Gemini request must be beyond its fields' types: a conversation, one spelling of
each field, a framing the replay sends, at least one candidate; `candidateCount` is `n`."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from replay_server.errors import BadRequest
from replay_server.paths import GEMINI_COUNT_PATH, GEMINI_PATH
from replay_server.wire.families import family_of
from tests.support import gemini_contents

ASK = gemini_contents("What is 2 + 2?")


def parse(body: Any, path: str = GEMINI_PATH, **fields: Any) -> Any:
    return family_of(path).parse(orjson.dumps(body), (), fields or None)


@pytest.mark.parametrize(("body", "fields", "param", "says"), [
    ({}, {}, "contents", "`contents` is required"),
    ({"contents": []}, {}, "contents", "`contents` is required"),
    ({"contents": ["hi"]}, {}, "contents", "`contents[0]` must be an object"),
    ({"contents": [{"parts": "hi"}]}, {}, "contents", "`contents[0].parts` must be a list"),
    ({"contents": ASK, "generationConfig": {}, "generation_config": {}}, {},
     "generationConfig", "are the same field"),
    ({"contents": ASK, "generationConfig": {"topK": 1, "top_k": 2}}, {},
     "generationConfig.topK", "are the same field"),
    ({"contents": ASK}, {"stream": True, "alt": "proto"}, "alt", "`alt=proto` is not served"),
    ({"contents": ASK, "generationConfig": {"candidateCount": 0}}, {},
     "generationConfig.candidateCount", "a positive integer"),
])
def test_a_request_the_replay_cannot_answer_is_a_400_naming_the_field(
        body: Any, fields: dict[str, Any], param: str, says: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse(body, **fields)
    assert caught.value.param == param and says in caught.value.message


def test_the_path_gives_the_model_and_the_stream() -> None:
    request = parse({"contents": ASK, "model": "from-the-body"}, model="gemini-2.5-flash",
                    stream=True, alt="sse")
    assert (request.model, request.stream, request.n) == ("gemini-2.5-flash", True, 1)


def test_candidate_count_is_n_in_either_spelling() -> None:
    assert parse({"contents": ASK, "generationConfig": {"candidateCount": 3}}).n == 3
    assert parse({"contents": ASK, "generation_config": {"candidate_count": 2}}).n == 2


def test_count_tokens_takes_contents_or_a_whole_request_not_both() -> None:
    assert parse({"contents": ASK}, GEMINI_COUNT_PATH).keys == parse(
        {"generateContentRequest": {"contents": ASK}}, GEMINI_COUNT_PATH).keys
    with pytest.raises(BadRequest, match="not both"):
        parse({"contents": ASK, "generateContentRequest": {"contents": ASK}}, GEMINI_COUNT_PATH)
    with pytest.raises(BadRequest, match="generateContentRequest.contents"):
        parse({"generateContentRequest": {"contents": []}}, GEMINI_COUNT_PATH)
