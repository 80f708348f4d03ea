"""The one-pass check of a plain saved line (`records.plain_record`) against the precise
field-by-field checks (`records.validate_precisely`): on saved lines mutated at random,
the one-pass check accepts only lines the precise checks accept, as the same record, and
every bad line still fails with the precise error."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.errors import LoadError
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.saved.record import (
    MARKER,
    TRANSPORT_FIELDS,
    plain_record,
    validate,
    validate_precisely,
)


def chat(n: int = 1, **request: Any) -> dict[str, Any]:
    choices = [{"index": i, "message": {"role": "assistant", "content": f"a{i}",
                                        "refusal": None, "reasoning": None},
                "logprobs": None, "finish_reason": "stop"} for i in range(n)]
    return {MARKER: 1, "endpoint": CHAT_PATH, "model": "m",
            "request": {"model": "m", "messages": [{"role": "system", "content": "s"},
                                                   {"role": "user", "content": "q"}],
                        "temperature": 0.0, **request},
            "response": {"id": "r", "object": "chat.completion", "choices": choices,
                         "usage": {"prompt_tokens": 3}},
            "source": {"harness": "h", "instance": "doc-0"}}


def completion(prompt: Any = "Once", n: int = 1) -> dict[str, Any]:
    return {MARKER: 1, "endpoint": COMPLETION_PATH, "model": "m",
            "request": {"model": "m", "prompt": prompt, "max_tokens": 5},
            "response": {"id": "r", "object": "text_completion",
                         "choices": [{"index": i, "text": f" t{i}", "finish_reason": "stop"}
                                     for i in range(n)]},
            "source": None}


BASES = [chat(), chat(2), chat(stream=True, user="u"), completion(), completion([1, 2], 3)]

# Values a mutation puts in place: every JSON type, and values that look right but are not.
VALUES: list[Any] = [None, True, False, 0, 1, 2, -1, 0.0, 1.0, "", "x", CHAT_PATH, COMPLETION_PATH,
          "/v1/responses", [], [1, 2], ["a"], [{}], [None], {}, {"content": "x"},
          [{"role": "user", "content": "q"}], {"role": "assistant", "content": "a"},
          {"type": "function", "function": {}}, [{"type": "text", "text": "x"}],
          {"content": 1}, {"content": "x", "tool_calls": "x"}]
NAMES = ["index", "message", "text", "content", "tool_calls", "function_call", "refusal",
         "role", "choices", "messages", "prompt", *sorted(TRANSPORT_FIELDS), "unusable", "batch",
         "sample_usage", "also_requests", "file", "line", "instance", "run", "source", "x"]
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
                    max_leaves=6)
VALUE = (st.sampled_from(VALUES) | JSON).map(copy.deepcopy)  # (VALUES stay as they are)


def places(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path to every value in `value`, itself included."""
    found = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            found += places(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += places(v, (*at, i))
    return found


def mutate(obj: Any, data: st.DataObject) -> Any:
    at = data.draw(st.sampled_from(places(obj)))
    if not at:
        return data.draw(VALUE)
    parent = obj
    for step in at[:-1]:
        parent = parent[step]
    how = data.draw(st.sampled_from(["set", "set", "delete", "add"]))
    if how == "delete":
        del parent[at[-1]]
    elif how == "add" and isinstance(parent[at[-1]], dict):
        parent[at[-1]][data.draw(st.sampled_from(NAMES))] = data.draw(VALUE)
    else:
        parent[at[-1]] = data.draw(VALUE)
    return obj


def outcome(obj: Any) -> Any:
    try:
        return validate_precisely(copy.deepcopy(obj), "f.jsonl", 7)
    except LoadError as error:
        return error


def check_agrees(obj: Any) -> None:
    """The one-pass check says yes only where the precise checks do, with the same record;
    `validate` fails exactly as the precise checks do."""
    precise = outcome(obj)
    plain = plain_record(copy.deepcopy(obj), "f.jsonl", 7)
    if plain is not None:
        assert not isinstance(precise, LoadError), precise
        assert plain == precise
        assert orjson.dumps(plain.to_json()) == orjson.dumps(precise.to_json())
        assert orjson.dumps(plain.response) == orjson.dumps(precise.response)
    if isinstance(precise, LoadError):
        with pytest.raises(LoadError) as caught:
            validate(obj, "f.jsonl", 7)
        assert str(caught.value) == str(precise)
        assert caught.value.field == precise.field


def single_mutations(base: dict[str, Any]) -> Any:
    """Every line one change away from `base`: each value replaced by each of VALUES,
    deleted, and each object given each of NAMES set to each of VALUES."""
    for at in places(base)[1:]:
        for how in [*range(len(VALUES)), "delete", *NAMES]:
            obj = copy.deepcopy(base)
            parent = obj
            for step in at[:-1]:
                parent = parent[step]
            if how == "delete":
                del parent[at[-1]]
                yield obj
            elif isinstance(how, int):
                parent[at[-1]] = copy.deepcopy(VALUES[how])
                yield obj
            elif isinstance(parent[at[-1]], dict):
                for value in VALUES:
                    parent[at[-1]][how] = copy.deepcopy(value)
                    yield copy.deepcopy(obj)


@pytest.mark.parametrize("base", BASES)
def test_the_one_pass_check_agrees_on_every_line_one_change_away(base: dict[str, Any]) -> None:
    for obj in single_mutations(base):
        check_agrees(obj)


@settings(max_examples=300)
@given(st.sampled_from(BASES), st.integers(2, 4), st.data())
def test_the_one_pass_check_accepts_only_what_the_precise_checks_accept(
        base: dict[str, Any], mutations: int, data: st.DataObject) -> None:
    obj = copy.deepcopy(base)
    for _ in range(mutations):
        obj = mutate(obj, data)
    check_agrees(obj)


@pytest.mark.parametrize("base", BASES)
def test_the_common_shapes_take_the_one_pass_check(base: dict[str, Any]) -> None:
    plain = plain_record(copy.deepcopy(base), "f.jsonl", 7)
    assert plain is not None
    assert plain == validate_precisely(copy.deepcopy(base), "f.jsonl", 7)
    assert "stream" not in plain.request and "user" not in plain.request
