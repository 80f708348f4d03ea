"""The lookup rules (docs/design.md, "Samples and repeats"), through the replay service."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay_server import errors
from replay_server.index.builder import Builder
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.replay.replayer import Replayer
from replay_server.saved.record import Record
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


def ask(r: Replayer, text: str, **request: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": user(text), **request}
    reply = r.handle(CHAT_PATH, orjson.dumps(body))
    result: dict[str, Any] = orjson.loads(reply.body)
    return result


def texts(body: dict[str, Any]) -> list[str]:
    return [c["message"]["content"] for c in body["choices"]]


def test_a_saved_prompt_gets_its_saved_body_byte_for_byte() -> None:
    response = chat_response("4", reasoning="2+2=4")
    r = replayer([chat_record("2+2?", response)])
    reply = r.handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user("2+2?")}))
    assert reply.body == orjson.dumps(response)


def test_an_unsaved_prompt_is_a_miss_naming_the_nearest_prompt() -> None:
    r = replayer([chat_record("What is 2+2?", chat_response("4"))])
    with pytest.raises(errors.NoMatch) as e:
        ask(r, "What is 2+3?")
    assert "saved.jsonl:1" in e.value.message
    assert "message 0 (user), character 10" in e.value.message
    assert r.stats.counts[MODEL]["replay_no_match"] == 1


def test_identical_saved_samples_serve_n1_any_number_of_times() -> None:
    r = replayer([chat_record("q", chat_response("a"), instance=1),
                  chat_record("q", chat_response("a"), instance=2)])
    for _ in range(5):
        assert texts(ask(r, "q")) == ["a"]


def test_different_generations_of_different_instances_are_ambiguous() -> None:
    r = replayer([chat_record("q", chat_response("a"), instance=1),
                  chat_record("q", chat_response("b"), instance=2)])
    with pytest.raises(errors.Ambiguous, match="2 saved instances"):
        ask(r, "q")


def test_allow_ambiguous_serves_them_in_saved_order() -> None:
    r = replayer([chat_record("q", chat_response("a"), instance=1),
                  chat_record("q", chat_response("b"), instance=2)],
                 Rules(allow_ambiguous=True))
    assert [texts(ask(r, "q")) for _ in range(2)] == [["a"], ["b"]]
    with pytest.raises(errors.Exhausted):
        ask(r, "q")


def test_allow_ambiguous_serves_instances_of_n_samples_one_after_the_other() -> None:
    """The second cursor: n=k requests under --allow-ambiguous, when several instances saved
    k different samples, get those instances in saved order, then run out."""
    r = replayer([chat_record("q", chat_response("a", "b"), instance=1),
                  chat_record("q", chat_response("c", "d"), instance=2, line=2)],
                 Rules(allow_ambiguous=True))
    assert [texts(ask(r, "q", n=2)) for _ in range(2)] == [["a", "b"], ["c", "d"]]
    with pytest.raises(errors.Exhausted, match="n=2"):
        ask(r, "q", n=2)
    assert texts(ask(r, "q")) == ["a"]  # the n=1 cursor is its own
    with pytest.raises(errors.Ambiguous):
        ask(replayer([chat_record("q", chat_response("a", "b"), instance=1),
                      chat_record("q", chat_response("c", "d"), instance=2, line=2)]), "q", n=2)


def test_n_equal_to_saved_count_serves_the_instance_whole_and_statelessly() -> None:
    r = replayer([chat_record("q", chat_response("a", "b", "c"))])
    for _ in range(3):
        assert texts(ask(r, "q", n=3)) == ["a", "b", "c"]


def test_n1_calls_get_saved_samples_in_order_then_exhausted() -> None:
    r = replayer([chat_record("q", chat_response("a", "b", "c"))])
    assert [texts(ask(r, "q"))[0] for _ in range(3)] == ["a", "b", "c"]
    with pytest.raises(errors.Exhausted, match="all 3 saved samples"):
        ask(r, "q")
    assert r.stats.counts[MODEL]["replay_exhausted"] == 1


def test_an_n_request_does_not_move_the_cursor() -> None:
    r = replayer([chat_record("q", chat_response("a", "b"))])
    assert texts(ask(r, "q")) == ["a"]
    assert texts(ask(r, "q", n=2)) == ["a", "b"]
    assert texts(ask(r, "q")) == ["b"]


def test_repeats_saved_as_separate_exchanges_form_one_instance() -> None:
    records = [chat_record("q", chat_response(t), instance="doc-0", line=i)
               for i, t in enumerate(["x", "y", "z"])]
    r = replayer(records)
    assert [texts(ask(r, "q"))[0] for _ in range(3)] == ["x", "y", "z"]
    both = ask(r, "q", n=3)
    assert texts(both) == ["x", "y", "z"]
    assert both["usage"] == {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}


def test_n_that_fits_no_instance_is_a_mismatch() -> None:
    r = replayer([chat_record("q", chat_response("a", "b"))])
    with pytest.raises(errors.NMismatch, match="n=3.*saved 2"):
        ask(r, "q", n=3)


def test_uniform_single_sample_cannot_be_stretched_to_n() -> None:
    r = replayer([chat_record("q", chat_response("a"))])
    with pytest.raises(errors.NMismatch):
        ask(r, "q", n=2)


def test_reset_starts_the_cursors_over() -> None:
    r = replayer([chat_record("q", chat_response("a", "b"))])
    ask(r, "q")
    r.reset()
    assert texts(ask(r, "q")) == ["a"]


def test_a_failed_request_moves_no_cursor() -> None:
    records = [completion_record("p1", completion_response("a", "b")),
               completion_record("p2", completion_response("c"), line=2)]
    r = replayer(records)
    body = {"model": MODEL, "prompt": ["p1", "missing"]}
    with pytest.raises(errors.NoMatch, match="prompt 1 of 2"):
        r.handle(COMPLETION_PATH, orjson.dumps(body))
    reply = r.handle(COMPLETION_PATH, orjson.dumps({"model": MODEL, "prompt": "p1"}))
    assert orjson.loads(reply.body)["choices"][0]["text"] == "a"


def test_unusable_instances_do_not_block_usable_ones() -> None:
    r = replayer([chat_record("q", None, unusable="text was null", instance=1),
                  chat_record("q", chat_response("a"), instance=2)])
    assert texts(ask(r, "q")) == ["a"]


def test_only_unusable_instances_give_replay_unusable_naming_why_and_where() -> None:
    r = replayer([chat_record("q", None, unusable="text was null", file="run.jsonl", line=7)])
    with pytest.raises(errors.Unusable, match=r"text was null \(saved at run.jsonl:7\)"):
        ask(r, "q")


def test_an_empty_string_is_an_answer() -> None:
    r = replayer([chat_record("q", chat_response(""))])
    assert texts(ask(r, "q")) == [""]


def test_a_null_content_with_nothing_else_is_unusable() -> None:
    r = replayer([chat_record("q", chat_response(None))])
    with pytest.raises(errors.Unusable, match="no content"):
        ask(r, "q")


def test_unknown_model_is_404_naming_served_models() -> None:
    r = replayer([chat_record("q", chat_response("a"))])
    with pytest.raises(errors.ModelNotFound, match="`gpt-4o` does not exist.*test/model"):
        ask(r, "q", model="gpt-4o")


def test_model_alias_maps_a_client_name() -> None:
    r = Replayer(build([chat_record("q", chat_response("a"))], **{"gpt-4o": MODEL}), LOOSE)
    assert texts(ask(r, "q", model="gpt-4o")) == ["a"]


def test_model_is_part_of_the_selection_not_the_key() -> None:
    r = replayer([chat_record("q", chat_response("a"), model="m1"),
                  chat_record("q", chat_response("b"), model="m2")])
    assert texts(ask(r, "q", model="m1")) == ["a"]
    assert texts(ask(r, "q", model="m2")) == ["b"]
    with pytest.raises(errors.BadRequest, match="several models"):
        r.handle(CHAT_PATH, orjson.dumps({"messages": user("q")}))


def test_strict_mode_compares_sampling_parameters() -> None:
    records = [chat_record("q", chat_response("a"), temperature=0.0, max_tokens=16)]
    loose = replayer(records)
    assert texts(ask(loose, "q", temperature=1.0)) == ["a"]
    strict = replayer(records, Rules(strict=True))
    assert texts(ask(strict, "q", temperature=0.0, max_tokens=16)) == ["a"]
    with pytest.raises(errors.ParamsMismatch, match="`temperature`.*requested 1, saved 0"):
        ask(strict, "q", temperature=1.0, max_tokens=16)
    with pytest.raises(errors.ParamsMismatch, match="`seed`"):
        ask(strict, "q", temperature=0.0, max_tokens=16, seed=3)


def test_strict_mode_separates_instances_saved_with_different_parameters() -> None:
    records = [chat_record("q", chat_response("short", finish="length"), max_tokens=1,
                           instance=1),
               chat_record("q", chat_response("long answer"), max_tokens=100, instance=2)]
    strict = replayer(records, Rules(strict=True))
    assert texts(ask(strict, "q", max_tokens=100)) == ["long answer"]
    with pytest.raises(errors.Ambiguous):
        ask(replayer(records), "q", max_tokens=100)


def test_batched_completion_prompts_are_looked_up_one_by_one() -> None:
    records = [completion_record("p1", completion_response("a1", "a2")),
               completion_record("p2", completion_response("b1", "b2"), line=2)]
    r = replayer(records)
    reply = r.handle(COMPLETION_PATH, orjson.dumps({"model": MODEL, "prompt": ["p2", "p1"],
                                                     "n": 2}))
    body = orjson.loads(reply.body)
    assert [(c["index"], c["text"]) for c in body["choices"]] == [
        (0, "b1"), (1, "b2"), (2, "a1"), (3, "a2")]
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22}


def test_token_id_prompts_are_keyed_as_token_ids() -> None:
    r = replayer([completion_record([1, 2, 3], completion_response("x"))])
    reply = r.handle(COMPLETION_PATH, orjson.dumps({"model": MODEL, "prompt": [[1, 2, 3]]}))
    assert orjson.loads(reply.body)["choices"][0]["text"] == "x"
    with pytest.raises(errors.NoMatch, match="token 2 differs"):
        r.handle(COMPLETION_PATH, orjson.dumps({"model": MODEL, "prompt": [1, 2, 4]}))


def test_strict_mode_tells_seeded_repeats_apart_by_their_seed() -> None:
    records = [chat_record("q", chat_response(t), instance="doc", line=i, seed=seed)
               for i, (t, seed) in enumerate([("x", 137), ("y", 190), ("z", 72)])]
    strict = replayer(records, Rules(strict=True))
    assert texts(ask(strict, "q", seed=190)) == ["y"]
    assert texts(ask(strict, "q", seed=190)) == ["y"]
    assert texts(ask(strict, "q", seed=72)) == ["z"]
    loose = replayer(records)  # each sample has its own seed: served by seed, statelessly
    assert [texts(ask(loose, "q", seed=190))[0] for _ in range(3)] == ["y", "y", "y"]
    assert [texts(ask(loose, "q"))[0] for _ in range(3)] == ["x", "y", "z"]


def test_a_record_is_answered_in_every_form_saved_with_it_and_used_once() -> None:
    """`also_requests`: the same request as token ids (lm-eval with a tokenizer)."""
    record = completion_record("2 + 2 =", completion_response(" 4"))
    record.also = [{"model": MODEL, "prompt": [17, 10, 17, 28]}]
    r = replayer([record])
    for prompt in ("2 + 2 =", [17, 10, 17, 28]):
        got = orjson.loads(r.handle(COMPLETION_PATH, orjson.dumps(
            {"model": MODEL, "prompt": prompt})).body)
        assert got["choices"][0]["text"] == " 4"
    assert r.stats.unused(MODEL) == 0 and r.index.models[MODEL].samples == 1
    with pytest.raises(errors.NoMatch):
        r.handle(COMPLETION_PATH, orjson.dumps({"model": MODEL, "prompt": [17, 10, 17]}))


@pytest.mark.parametrize("system, difference", [
    (None, "message 0 (system): missing in the request"),
    ("Be very brief.", "message 0 (system), character 3: the request has a word more")])
def test_a_drifted_system_prompt_is_compared_with_the_same_document(
        system: str | None, difference: str) -> None:
    """The nearest prompt by prefix would be another document sharing the system text;
    the miss names the request's own document and what really differs."""
    saved = [chat_record([{"role": "system", "content": "Be brief."}, *user(f"Q{i}?")],
                         chat_response(f"A{i}"), line=i, instance=f"doc{i}") for i in range(9)]
    asked = ([{"role": "system", "content": system}] if system else []) + user("Q4?")
    with pytest.raises(errors.NoMatch) as e:
        replayer(saved).handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": asked}))
    assert e.value.detail["nearest"] == "saved.jsonl:4 (doc4)"
    assert e.value.detail["difference"] == difference


def test_a_system_prompt_the_saved_run_did_not_have_is_named() -> None:
    saved = [chat_record(f"Q{i}?", chat_response(f"A{i}"), line=i, instance=f"doc{i}")
             for i in range(9)]
    asked = [{"role": "system", "content": "Be brief."}, *user("Q4?")]
    with pytest.raises(errors.NoMatch) as e:
        replayer(saved).handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": asked}))
    assert e.value.detail["nearest"] == "saved.jsonl:4 (doc4)"
    assert e.value.detail["difference"] == "message 0 (system): not in the saved prompt"


# The sampling parameters of saved requests, remembered per set of plain values
# (indexing.Builder._sampling_params): each is exactly what `Table.params` makes,
# whatever came before it (1, 1.0 and true are equal in Python but not in JSON).
PARAM_VALUES = st.sampled_from([None, True, False, 0, 1, 2, 0.0, -0.0, 1.0, 0.5, 1e300,
                                2.0 ** 60, 2 ** 60, "", "1", [1], [1.0], {"a": 1}])
REQUESTS = st.dictionaries(st.sampled_from(["temperature", "seed", "top_p", "stop", "n",
                                            "max_tokens", "logit_bias", "model", "x",
                                            "prompt", "messages"]),
                           PARAM_VALUES, max_size=4)


@given(st.lists(st.tuples(st.sampled_from([CHAT_PATH, COMPLETION_PATH]), REQUESTS),
                max_size=12))
def test_remembered_sampling_params_are_the_ones_computed(
        requests: list[tuple[str, dict[str, Any]]]) -> None:
    builder = Builder()
    for endpoint, fields in requests * 2:
        family = family_of(endpoint)
        request = {**fields, "messages": [{"role": "user", "content": "q"}]} \
            if endpoint == CHAT_PATH else {**fields, "prompt": "q"}
        assert builder._sampling_params(request, family) == family.table.params(request)


def test_the_prompt_is_never_a_sampling_parameter() -> None:
    # (what lets indexing.Builder remember sampling parameters without the prompt)
    chat, completions = family_of(CHAT_PATH).table, family_of(COMPLETION_PATH).table
    assert chat.sampling_params({"messages": [{"role": "user"}]}) == {}
    assert completions.sampling_params({"prompt": "q"}) == {}
    # another endpoint's prompt field is an unknown field, compared
    assert chat.sampling_params({"prompt": "q"}) == {"prompt": "q"}
