"""vLLM's tokenizer endpoints, answered by the replay service without a server: a recorded
answer by its key, else one computed with the run's tokenizer exactly as the `tokenizers`
library computes it, else unanswered (404 `tokenizer_unanswered`), counted apart from
the generations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from replay_server.errors import BadRequest, ModelNotFound, TokenizerUnanswered
from replay_server.index.samples import Rules
from replay_server.replay.replayer import Replayer
from replay_server.saved.local_tokenizer import load_tokenizer
from tests.support import MODEL, build, chat_record, chat_response, tokenizer_record

DATA = Path(__file__).parents[1] / "data" / "gen"
BPE = DATA / "tokenizer_bpe"  # its post-processor adds a BOS
WORDLEVEL = DATA / "tokenizer"
CHAT = [chat_record("q", chat_response("a"))]
RECORDED = tokenizer_record("/tokenize", {"model": MODEL, "prompt": "Hello"},
                            {"count": 2, "max_model_len": 4096, "tokens": [0, 9],
                             "token_strs": None}, line=2)


def replayer(records: list[Any], tokenizer: Path | None = None) -> Replayer:
    local = load_tokenizer(tokenizer) if tokenizer is not None else None
    return Replayer(build(CHAT + records), Rules(), local)


def ask(r: Replayer, endpoint: str, body: dict[str, Any] | None = None) -> Any:
    headers, data = r.tokenizer.answer(endpoint, b"" if body is None else orjson.dumps(body))
    return orjson.loads(data), dict(headers)[b"x-replay-source"]


def test_a_recorded_answer_is_served_as_recorded_for_its_key() -> None:
    r = replayer([RECORDED], BPE)  # recorded wins over computed
    answer, source = ask(r, "/tokenize", {"prompt": "Hello", "add_special_tokens": True})
    assert answer == RECORDED.response and source == b"recording"
    assert r.stats.tokenizer["recorded"] == 1


@pytest.mark.parametrize("folder", [BPE, WORDLEVEL])
@pytest.mark.parametrize("special", [True, False, None])
def test_tokenize_is_computed_as_the_tokenizers_library_computes_it(
        folder: Path, special: bool | None) -> None:
    text = "Hello world, what is 2 + 3?"
    body: dict[str, Any] = {"model": MODEL, "prompt": text, "return_token_strs": True}
    if special is not None:
        body["add_special_tokens"] = special
    answer, source = ask(replayer([], folder), "/tokenize", body)
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    expected = backend.encode(text, add_special_tokens=special is not False)
    assert source == b"--tokenizer"
    assert answer == {"count": len(expected.ids), "tokens": expected.ids,
                      "token_strs": expected.tokens}  # no max_model_len: not known
    if folder == BPE:  # the default (unset) adds the BOS, as vLLM's default does
        plain = backend.encode(text, add_special_tokens=False).ids
        assert answer["count"] == len(plain) + (special is not False)


def test_max_model_len_is_served_only_when_the_recordings_say_it() -> None:
    r = replayer([RECORDED], WORDLEVEL)
    answer, _ = ask(r, "/tokenize", {"prompt": "What is 2 + 3?"})
    assert answer["max_model_len"] == 4096 and list(answer) == [
        "count", "max_model_len", "tokens", "token_strs"]  # vLLM's order
    assert answer["token_strs"] is None
    models = orjson.loads(r.models_body())["data"]
    assert models[0]["max_model_len"] == 4096
    assert "max_model_len" not in orjson.loads(replayer([]).models_body())["data"][0]


def test_detokenize_is_computed_as_the_tokenizers_library_decodes() -> None:
    backend = Tokenizer.from_file(str(BPE / "tokenizer.json"))
    ids = backend.encode("Hello world", add_special_tokens=True).ids
    answer, _ = ask(replayer([], BPE), "/detokenize", {"tokens": ids})
    assert answer == {"prompt": backend.decode(ids, skip_special_tokens=False)}


@pytest.mark.parametrize(("endpoint", "body", "why"), [
    ("/tokenize", {"prompt": "never recorded"}, "no --tokenizer"),
    ("/detokenize", {"tokens": [1]}, "no --tokenizer"),
    ("/tokenize", {"messages": [{"role": "user", "content": "q"}]}, "chat template"),
    ("/tokenizer_info", None, "transformers' view"),
])
def test_what_cannot_be_answered_faithfully_is_unanswered(
        endpoint: str, body: dict[str, Any] | None, why: str) -> None:
    for folder in (None, WORDLEVEL):
        r = replayer([], folder)
        if folder is not None and "no --tokenizer" in why:
            continue  # computed then
        with pytest.raises(TokenizerUnanswered, match=why) as e:
            ask(r, endpoint, body)
        assert e.value.status == 404 and e.value.code == "tokenizer_unanswered"
        assert r.stats.tokenizer == {"unanswered": 1}
        assert not r.stats.failures and r.stats.with_outcome() == 1  # not a replay miss


def test_an_id_outside_the_vocabulary_is_never_guessed() -> None:
    with pytest.raises(TokenizerUnanswered, match="outside the tokenizer's vocabulary"):
        ask(replayer([], WORDLEVEL), "/detokenize", {"tokens": [10 ** 6]})


def test_recordings_that_differ_for_one_key_answer_neither() -> None:
    other = tokenizer_record("/tokenize", {"prompt": "Hello"},
                             {"count": 1, "max_model_len": 2048, "tokens": [5],
                              "token_strs": None}, line=3)
    r = replayer([RECORDED, other], WORDLEVEL)  # not computed either: the run disagrees
    with pytest.raises(TokenizerUnanswered, match="recorded answers to this request differ"):
        ask(r, "/tokenize", {"prompt": "Hello"})
    assert r.index.models[MODEL].max_model_len is None  # they disagree on it too


def test_every_unanswered_call_is_counted_and_grouped_by_reason() -> None:
    r = replayer([])
    for body in ({"prompt": "a"}, {"prompt": "b"}, {"model": "no/such", "prompt": "a"},
                 {"prompt": 3}):
        with pytest.raises((TokenizerUnanswered, ModelNotFound, BadRequest)):
            ask(r, "/tokenize", body)
    grouped = {why: f.attempts for (_, why), f in r.stats.tokenizer_unanswered.items()}
    assert r.stats.tokenizer["unanswered"] == 4 and len(grouped) == 3
    assert grouped["no recorded answer for this request, and no --tokenizer to compute "
                   "one"] == 2
    assert r.status()["tokenizer"] == {"recorded": 0, "computed": 0, "unanswered": 4}
    assert not r.stats.failures


def test_an_unsaved_count_tokens_prompt_is_an_unanswered_token_count_not_a_miss() -> None:
    # Anthropic's count_tokens carries no generation (an inspect_ai log keeps none of
    # them): its miss is counted with the tokenizer calls; a Messages miss stays a miss
    from replay_server.errors import NoMatch
    from replay_server.paths import COUNT_TOKENS_PATH, MESSAGES_PATH
    from tests.support import message_record, message_response

    r = Replayer(build([message_record("q", message_response("a")),
                        message_record("q", {"input_tokens": 3}, line=2,
                                       endpoint=COUNT_TOKENS_PATH)]), Rules())
    saved = {"model": MODEL, "messages": [{"role": "user", "content": "q"}]}
    assert orjson.loads(r.handle(COUNT_TOKENS_PATH, orjson.dumps(saved)).body) == {
        "input_tokens": 3}
    other = {"model": MODEL, "messages": [{"role": "user", "content": "not saved"}]}
    for _ in range(2):
        with pytest.raises(NoMatch):
            r.handle(COUNT_TOKENS_PATH, orjson.dumps(other))
    assert not r.stats.failures and r.stats.tokenizer["unanswered"] == 2
    [(endpoint, why)] = r.stats.tokenizer_unanswered
    assert endpoint == COUNT_TOKENS_PATH and "count_tokens" in why
    with pytest.raises(NoMatch):
        r.handle(MESSAGES_PATH, orjson.dumps({**other, "max_tokens": 5}))
    assert len(r.stats.failures) == 1
