"""The key contract: what matches, and the near-misses that must not."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay_server.wire import keys

SYSTEM = {"role": "system", "content": "Be brief."}
USER = {"role": "user", "content": "What is 2+2?"}
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


def chat_key(**request: Any) -> bytes:
    request.setdefault("messages", [SYSTEM, USER])
    return keys.key_of(keys.chat_prompt(request))


def completion_key(prompt: Any, **request: Any) -> bytes:
    return keys.key_of(keys.completion_prompt(prompt, {"prompt": prompt, **request}))


BASE = chat_key()


@pytest.mark.parametrize("request_", [
    {"messages": [{"content": "Be brief.", "role": "system"}, {"content": "What is 2+2?",
                                                               "role": "user"}]},
    {"messages": [SYSTEM, {**USER, "name": None}]},
    {"messages": [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]},
    {"messages": [SYSTEM, USER], "tools": []},
    {"messages": [SYSTEM, USER], "tools": None, "tool_choice": "none"},
    {"messages": [SYSTEM, USER], "tool_choice": "auto"},
    {"messages": [SYSTEM, USER], "response_format": {"type": "text"}},
    {"messages": [SYSTEM, USER], "response_format": None},
    {"messages": [SYSTEM, USER], "model": "other", "temperature": 0.7, "max_tokens": 5,
     "seed": 1, "stop": ["\n"], "n": 3, "stream": True, "user": "u", "logprobs": True},
], ids=["key-order", "null-field", "single-text-part", "empty-tools", "null-tools+choice",
        "choice-without-tools", "text-format", "null-format", "model-and-sampling"])
def test_allowed_normalisations_give_the_same_key(request_: dict[str, Any]) -> None:
    assert chat_key(**request_) == BASE


@pytest.mark.parametrize("request_", [
    {"messages": [SYSTEM, {"role": "user", "content": "What is 2+2? "}]},
    {"messages": [SYSTEM, {"role": "user", "content": " What is 2+2?"}]},
    {"messages": [SYSTEM, {"role": "user", "content": "what is 2+2?"}]},
    {"messages": [SYSTEM, {"role": "user", "content": "What is 2+2?\n"}]},
    {"messages": [SYSTEM, {"role": "assistant", "content": "What is 2+2?"}]},
    {"messages": [USER, SYSTEM]},
    {"messages": [USER]},
    {"messages": [SYSTEM, USER, USER]},
    {"messages": [SYSTEM, {**USER, "name": "alice"}]},
    {"messages": [SYSTEM, {"role": "user", "content": [
        {"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}]},
    {"messages": [SYSTEM, USER], "tools": [TOOL]},
    {"messages": [SYSTEM, USER], "response_format": {"type": "json_object"}},
], ids=["trailing-space", "leading-space", "case", "newline", "role", "swapped", "dropped",
        "repeated", "name", "two-text-parts", "tools", "json-format"])
def test_near_misses_do_not_match(request_: dict[str, Any]) -> None:
    assert chat_key(**request_) != BASE


def test_tool_choice_counts_when_tools_are_given() -> None:
    with_tools = chat_key(tools=[TOOL])
    assert chat_key(tools=[TOOL], tool_choice="required") != with_tools
    assert chat_key(tools=[TOOL], tool_choice=None) == with_tools


def test_completion_prompts_string_and_token_ids_are_distinct() -> None:
    assert completion_key("abc") == completion_key("abc")
    assert completion_key("abc") != completion_key("abc ")
    assert completion_key([1, 2, 3]) == completion_key([1, 2, 3])
    assert completion_key([1, 2, 3]) != completion_key([1, 2, 4])
    assert completion_key([1, 2, 3]) != completion_key("[1,2,3]")


def test_echo_true_changes_the_key_and_false_does_not() -> None:
    assert completion_key("abc", echo=False) == completion_key("abc")
    assert completion_key("abc", echo=True) != completion_key("abc")


def test_chat_and_completion_never_share_a_key() -> None:
    text = "What is 2+2?"
    assert completion_key(text) != chat_key(messages=[{"role": "user", "content": text}])


def test_canonical_json_is_sorted_compact_and_keeps_utf8() -> None:
    data = keys.canonical({"b": 1, "a": "é ✓"})
    assert data == '{"a":"é ✓","b":1}'.encode()


def test_unicode_is_never_normalised() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert completion_key(composed) != completion_key(decomposed)


def test_sampling_params_drop_nulls_and_leave_out_n() -> None:
    params = keys.sampling_params({"temperature": 0, "top_p": None, "n": 4, "seed": 1,
                                   "messages": [], "stream": True, "model": "m"}, keys.CHAT)
    assert params == {"temperature": 0, "seed": 1}


# Properties (hypothesis): the allowed normalisations never change a key; any change to a
# text, a role, the order of messages or the tools always does.
TEXT = st.text(max_size=40)
ROLE = st.sampled_from(["system", "user", "assistant", "tool"])
MESSAGE = st.fixed_dictionaries({"role": ROLE, "content": TEXT})
MESSAGES = st.lists(MESSAGE, min_size=1, max_size=5)
TOOLS = st.lists(st.fixed_dictionaries({"type": st.just("function"), "function":
                 st.fixed_dictionaries({"name": st.text(min_size=1, max_size=10)})}),
                 max_size=2)


def shuffled_keys(value: Any, data: st.DataObject) -> Any:
    if isinstance(value, dict):
        items = data.draw(st.permutations(list(value.items())))
        return {k: shuffled_keys(v, data) for k, v in items}
    if isinstance(value, list):
        return [shuffled_keys(v, data) for v in value]
    return value


@given(MESSAGES, TOOLS, st.data())
def test_equal_requests_under_the_allowed_normalisations_have_equal_keys(
        messages: list[dict[str, Any]], tools: list[Any], data: st.DataObject) -> None:
    plain = chat_key(messages=messages, tools=tools)
    variant = [dict(m) for m in messages]
    for m in variant:
        if data.draw(st.booleans()):
            m["content"] = [{"type": "text", "text": m["content"]}]
        if data.draw(st.booleans()):
            m["name"] = None
    extra: dict[str, Any] = ({"tool_choice": "auto"} if not tools and data.draw(st.booleans())
                             else {})
    if data.draw(st.booleans()):
        extra["response_format"] = {"type": "text"}
    request = shuffled_keys({"messages": variant, "tools": tools or None, **extra}, data)
    assert chat_key(**request) == plain


@given(MESSAGES, st.data())
def test_any_change_to_a_text_a_role_the_order_or_the_tools_changes_the_key(
        messages: list[dict[str, Any]], data: st.DataObject) -> None:
    plain = chat_key(messages=messages)
    i = data.draw(st.integers(0, len(messages) - 1))
    changed = [dict(m) for m in messages]
    change = data.draw(st.sampled_from(["text", "role", "order", "tools"]))
    if change == "text":
        changed[i]["content"] = data.draw(TEXT.filter(lambda t: t != messages[i]["content"]))
    elif change == "role":
        changed[i]["role"] = data.draw(ROLE.filter(lambda r: r != messages[i]["role"]))
    elif change == "order":
        order = data.draw(st.permutations(range(len(messages))))
        changed = [changed[j] for j in order]
        if changed == messages:
            return
    else:
        assert chat_key(messages=messages, tools=[TOOL]) != plain
        return
    assert chat_key(messages=changed) != plain
