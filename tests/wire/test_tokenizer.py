"""The tokenizer requests' keys, as pure functions: every field that changes vLLM's answer
is key, nothing else is, and a request is checked as vLLM checks it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from replay_server.errors import BadRequest
from replay_server.wire import keys, tokenizer
from replay_server.wire.chat.request import prompt as chat_prompt


def key(endpoint: str, data: dict[str, Any]) -> bytes:
    return tokenizer.parse(endpoint, orjson.dumps(data)).key


PROMPT = {"model": "m", "prompt": "Hello world"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(("same", "endpoint"), [
    ({"prompt": "Hello world"}, "/tokenize"),  # model selects the saved run: not key
    ({**PROMPT, "add_special_tokens": True}, "/tokenize"),  # the default
    ({**PROMPT, "return_token_strs": False}, "/tokenize"),
    ({**PROMPT, "return_token_strs": None}, "/tokenize"),
    ({**PROMPT, "something_vllm_ignores": 1}, "/tokenize"),
])
def test_what_does_not_change_the_answer_is_not_keyed(same: dict[str, Any],
                                                       endpoint: str) -> None:
    assert key(endpoint, same) == key("/tokenize", PROMPT)


@pytest.mark.parametrize("other", [
    {**PROMPT, "prompt": "Hello world "},  # exact means exact
    {**PROMPT, "prompt": "hello world"},
    {**PROMPT, "add_special_tokens": False},
    {**PROMPT, "return_token_strs": True},
])
def test_what_changes_the_answer_is_keyed(other: dict[str, Any]) -> None:
    assert key("/tokenize", other) != key("/tokenize", PROMPT)


@pytest.mark.parametrize("other", [
    {**CHAT, "add_generation_prompt": False},
    {**CHAT, "continue_final_message": True, "add_generation_prompt": False},
    {**CHAT, "add_special_tokens": True},
    {**CHAT, "chat_template": "{{ messages }}"},
    {**CHAT, "chat_template_kwargs": {"enable_thinking": False}},
    {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]},
    {**CHAT, "messages": [{"role": "user", "content": "Hi "}]},
])
def test_a_chat_form_request_keys_what_the_template_renders(other: dict[str, Any]) -> None:
    assert key("/tokenize", other) != key("/tokenize", CHAT)


def test_chat_defaults_and_one_text_part_are_the_same_request() -> None:
    parts = {**CHAT, "messages": [{"role": "user", "content": [{"type": "text",
                                                                "text": "Hi"}]}]}
    for same in (parts, {**CHAT, "add_generation_prompt": True, "add_special_tokens": False,
                         "chat_template_kwargs": {}, "tools": []}):
        assert key("/tokenize", same) == key("/tokenize", CHAT)


def test_the_forms_never_share_a_key_with_each_other_nor_with_a_generation() -> None:
    found = {key("/tokenize", {"prompt": "Hi"}), key("/detokenize", {"tokens": [1]}),
             key("/tokenize", CHAT), key("/tokenizer_info", {}),
             keys.key_of(chat_prompt(CHAT))}
    assert len(found) == 5
    # a prompt wins over messages, as in vLLM's union (TokenizeCompletionRequest first)
    both = tokenizer.parse("/tokenize", orjson.dumps({**CHAT, "prompt": "Hi"}))
    assert both.kind == "tokenize"


def test_detokenize_keys_the_ids_in_order() -> None:
    assert key("/detokenize", {"tokens": [1, 2]}) != key("/detokenize", {"tokens": [2, 1]})
    assert key("/detokenize", {"model": "m", "tokens": [1, 2]}) == \
        key("/detokenize", {"tokens": [1, 2]})


def test_the_key_bytes_are_pinned() -> None:
    """A change to how a tokenizer request is keyed is a new KEY_VERSION."""
    canonical = keys.canonical(tokenizer.table_of("/tokenize", PROMPT).prompt(PROMPT, {}))
    assert canonical == b'{"kind":"tokenize","prompt":"Hello world","v":4}'


@pytest.mark.parametrize(("endpoint", "body", "param"), [
    ("/tokenize", {"prompt": 3}, "prompt"),
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"messages": []}, "messages"),
    ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ("/detokenize", {"tokens": "1"}, "tokens"),
    ("/detokenize", {"tokens": [1, "2"]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {}, "tokens"),
])
def test_a_malformed_request_names_its_field(endpoint: str, body: dict[str, Any],
                                             param: str) -> None:
    with pytest.raises(BadRequest) as e:
        tokenizer.parse(endpoint, orjson.dumps(body))
    assert e.value.param == param


def test_both_generation_prompt_and_continue_is_refused_like_vllm() -> None:
    with pytest.raises(BadRequest, match="Cannot set both"):
        tokenizer.parse("/tokenize", orjson.dumps(
            {**CHAT, "continue_final_message": True, "add_generation_prompt": True}))


def test_tokenizer_info_takes_no_body() -> None:
    assert tokenizer.parse("/tokenizer_info", b"").kind == "tokenizer_info"
    with pytest.raises(BadRequest):
        tokenizer.parse("/tokenize", b"not json")


@pytest.mark.parametrize(("endpoint", "response", "problem"), [
    ("/tokenize", {"count": 2, "tokens": [1]}, "`count`"),
    ("/tokenize", {"count": 1, "tokens": ["a"]}, "`tokens`"),
    ("/detokenize", {"prompt": None}, "`prompt`"),
    ("/tokenizer_info", [], "an object"),
])
def test_a_recorded_answer_must_be_one_vllm_sends(endpoint: str, response: Any,
                                                  problem: str) -> None:
    found = tokenizer.answer_problem(endpoint, response)
    assert found is not None and problem in found
    assert tokenizer.answer_problem("/tokenize", {"count": 1, "tokens": [5]}) is None
