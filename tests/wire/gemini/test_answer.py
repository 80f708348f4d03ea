"""A saved Gemini response: its candidates checked and put in index order; a candidate
that finished is an answer (whatever the reason), one with neither a finishReason nor
parts is not; a blocked prompt's answer is one; two saved candidates are the same
generation when all of them but the index is."""

from __future__ import annotations

from typing import Any

import pytest

from replay_server.wire.answer import BadAnswer
from replay_server.wire.gemini import answer
from tests.support import gemini_response

BLOCKED = {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "m"}


def test_candidates_go_in_index_order_a_left_out_index_being_0() -> None:
    body = gemini_response("a", "b")
    body["candidates"].reverse()
    del body["candidates"][1]["index"]
    ordered, why = answer.saved_answer(body)
    assert why is None and [c["content"]["parts"][0]["text"] for c in ordered["candidates"]] \
        == ["a", "b"]
    plain = gemini_response("a", "b")
    assert answer.saved_answer(plain)[0] is plain  # (in order: not copied)


@pytest.mark.parametrize(("edit", "field"), [
    (lambda b: b.update(candidates={}), "candidates"),
    (lambda b: b["candidates"].append("c"), "candidates[2]"),
    (lambda b: b["candidates"][1].update(index=0), "candidates"),
    (lambda b: b["candidates"][0].update(index="0"), "candidates[0].index"),
    (lambda b: b["candidates"][0].update(content=[]), "candidates[0].content"),
    (lambda b: b["candidates"][0]["content"].update(parts=["a"]), "candidates[0].content.parts"),
    (lambda b: b.update(usageMetadata=3), "usageMetadata"),
])
def test_a_wrong_shape_is_a_bad_answer_naming_the_field(edit: Any, field: str) -> None:
    body = gemini_response("a", "b")
    edit(body)
    with pytest.raises(BadAnswer) as caught:
        answer.saved_answer(body)
    assert caught.value.field == field


@pytest.mark.parametrize(("body", "why"), [
    (gemini_response(""), None),  # an empty text is an answer
    ({"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]}, None),
    ({"candidates": [{"finishReason": "SAFETY", "index": 0}]}, None),
    (BLOCKED, None),
    (gemini_response("a", finish=None), None),  # parts, and no finishReason yet
    ({"candidates": [{"content": {"role": "model"}, "index": 0}]}, "unfinished"),
    ({"modelVersion": "m"}, "no candidates"),
    ({"error": {"code": 500}}, "an error"),
])
def test_what_is_an_answer(body: dict[str, Any], why: str | None) -> None:
    reason = answer.saved_answer(body)[1]
    assert reason is None if why is None else why in str(reason)


def test_samples_and_generations() -> None:
    two = gemini_response("a", "a")
    assert answer.samples(two) == 2 and answer.samples(BLOCKED) == 1
    first, second = answer.generations(two)
    assert first == second  # the same candidate but for its index
    assert answer.generations(gemini_response("a"))[0] != answer.generations(
        gemini_response("a", finish="MAX_TOKENS"))[0]


def test_a_count_is_its_total_tokens() -> None:
    assert answer.saved_count({"totalTokens": 7})[1] is None
    assert answer.saved_count({})[1] is None  # (a left-out count is 0, as the API leaves it)
    with pytest.raises(BadAnswer, match="totalTokens"):
        answer.saved_count({"totalTokens": "7"})


def test_a_stream_is_whole_when_every_candidate_asked_for_finished() -> None:
    two: Any = {"contents": [], "generationConfig": {"candidateCount": 2}}
    assert answer.unfinished(two, gemini_response("a", "b")) is None
    assert "1 of 2" in str(answer.unfinished(two, gemini_response("a")))
    assert "finishReason" in str(answer.unfinished({}, gemini_response("a", finish=None)))
    assert answer.unfinished({}, BLOCKED) is None
    assert answer.unfinished({}, {"modelVersion": "m"}) is not None
