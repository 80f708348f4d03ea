"""A Gemini reply: the saved body byte for byte when one saved answer is the reply;
otherwise assembled from the candidates chosen, with a usage only taken or derived from
saved counts (one candidate of several: the prompt's counts, or its own saved usage)."""

from __future__ import annotations

from typing import Any

import orjson

from replay_server.index.samples import Rules
from replay_server.paths import GEMINI_PATH
from replay_server.replay.replayer import Replayer
from replay_server.saved.record import validate
from tests.support import build, gemini_contents, gemini_record, gemini_response

ASK = {"contents": gemini_contents("2 + 2?")}
USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 6, "thoughtsTokenCount": 4,
         "totalTokenCount": 20, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 10}]}


def ask(replayer: Replayer, n: int = 1) -> bytes:
    body = {**ASK, "generationConfig": {"candidateCount": n}} if n > 1 else ASK
    return replayer.handle(GEMINI_PATH, orjson.dumps(body)).body


def test_one_saved_answer_is_sent_as_saved() -> None:
    saved = gemini_response("Four.", "4", usage=USAGE)
    replayer = Replayer(build([gemini_record("2 + 2?", saved)]), Rules())
    assert ask(replayer, 2) == orjson.dumps(saved)  # (validate's body, re-encoded as saved)


def test_one_candidate_of_several_has_the_prompts_counts_or_its_own() -> None:
    saved = gemini_response("Four.", "4", usage=USAGE)
    replayer = Replayer(build([gemini_record("2 + 2?", saved)]), Rules())
    first, second = (orjson.loads(ask(replayer)) for _ in range(2))
    assert [first["candidates"], second["candidates"]] == [
        [{**saved["candidates"][0], "index": 0}], [{**saved["candidates"][1], "index": 0}]]
    assert first["usageMetadata"] == {"promptTokenCount": 10, "promptTokensDetails": [
        {"modality": "TEXT", "tokenCount": 10}]}
    assert first["responseId"] == saved["responseId"]
    own = {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12}
    record = gemini_record("2 + 2?", saved).to_json()
    record["sample_usage"] = [own, None]
    replayer = Replayer(build([validate(record, "saved.jsonl", 1)]), Rules())
    assert orjson.loads(ask(replayer))["usageMetadata"] == own


def test_candidates_of_several_saved_answers_sum_what_each_generated() -> None:
    usages: list[Any] = [
        {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12},
        {"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 5,
         "totalTokenCount": 18}]
    records = [gemini_record("2 + 2?", gemini_response(t, usage=u, rid=f"r{i}"), line=i + 1)
               for i, (t, u) in enumerate(zip(["Four.", "4"], usages, strict=True))]
    got = orjson.loads(ask(Replayer(build(records), Rules()), 2))
    assert [c["index"] for c in got["candidates"]] == [0, 1]
    assert got["usageMetadata"] == {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                    "thoughtsTokenCount": 5, "totalTokenCount": 20}
    assert got["responseId"] == "r0"
    usages[1] = None  # a count not saved: the prompt's counts alone
    records[1] = gemini_record("2 + 2?", gemini_response("4", usage=None), line=2)
    got = orjson.loads(ask(Replayer(build(records), Rules()), 2))
    assert got["usageMetadata"] == {"promptTokenCount": 10}
