"""The key contract: what matches, and the near-misses that must not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.errors import BadRequest
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH
from replay_server.wire import keys
from replay_server.wire.chat import request as chat
from replay_server.wire.chat.fields import TABLE as CHAT
from replay_server.wire.completions import request as completions
from replay_server.wire.families import ENDPOINTS, FAMILIES, family_of, fields_table
from tests.support import docs_page

SYSTEM = {"role": "system", "content": "Be brief."}
USER = {"role": "user", "content": "What is 2+2?"}
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


def chat_key(**request: Any) -> bytes:
    request.setdefault("messages", [SYSTEM, USER])
    return keys.key_of(chat.prompt(request))


def completion_key(prompt: Any, **request: Any) -> bytes:
    return keys.key_of(completions.prompt(prompt, {"prompt": prompt, **request}))


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


def test_legacy_functions_give_tools_too() -> None:
    function = TOOL["function"]
    with_functions = chat_key(functions=[function])
    assert chat_key(functions=[function], function_call={"name": "add"}) != with_functions
    assert chat_key(functions=[function], tool_choice="required") != with_functions
    assert chat_key(functions=[function], parallel_tool_calls=False) != with_functions


@pytest.mark.parametrize("endpoint", list(FAMILIES))
def test_a_field_that_needs_another_names_key_fields_of_its_table(endpoint: str) -> None:
    """`needs` names fields that reach the keyed prompt, or the field would always be
    dropped (a misspelt name, a strict field): the table refuses such a rule."""
    table = family_of(endpoint).table
    for f in table.fields:
        for name in f.needs:
            assert table.by_name[name].role == keys.KEY, (f.name, name)
    with pytest.raises(AssertionError, match="tool_choice"):
        keys.Table("t", (keys.field("tools", keys.STRICT, "array", "r"),
                         keys.field("tool_choice", keys.KEY, "string", "r",
                                    needs=("tools", "tool"))), own=())


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
    params = CHAT.sampling_params({"temperature": 0, "top_p": None, "n": 4, "seed": 1,
                                   "messages": [], "stream": True, "model": "m"})
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


# --- one engine, one version -------------------------------------------------------------

PINNED: dict[str, tuple[str, dict[str, Any], list[str]]] = {  # name -> (endpoint, request,
    # the hex of its keys), at KEY_VERSION 4
    "chat": ("/v1/chat/completions", {
        "model": "m", "temperature": 0, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]},
        ["eb51225ea6fb191e606f08bd67cd0ae4"]),
    "chat-tools-echo": ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Add 1 and 2.", "name": None},
                     {"role": "assistant", "content": "Calling"}],
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"b": {"type": "integer"},
                                             "a": {"type": "integer"}}}}}],
        "tool_choice": "auto", "echo": True, "response_format": {"type": "text"}},
        ["2e94a9da8e6a03e47177e213e94a48a9"]),
    "completion": ("/v1/completions", {"prompt": "Question: 2+2=\nAnswer:", "max_tokens": 5},
                   ["5f826fedc573bae2ae27e3fd67818742"]),
    "completion-token-ids-batch": ("/v1/completions", {
        "prompt": [[1, 2, 3], [4, 5]], "echo": True, "logprobs": 1},
        ["5afa902e49f553a1b5ec7bc11ea3f9ea", "543468007a5aef8e1926b58f64c85934"]),
    "responses": ("/v1/responses", {
        "input": "What is 2+2?", "instructions": "Be brief.",
        "text": {"format": {"type": "text"}}}, ["e786b633d1fb3217fef550cb64cbffc1"]),
    "messages": ("/v1/messages", {
        "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "anthropic-beta": "b-1,a-2"},
        ["eeb6ca26dbcdcb98115ff1be8370320c"]),
    "count_tokens": ("/v1/messages/count_tokens", {
        "model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}]},
        ["07daf08ac754c6fe1bda999f55103c4b"]),
    "responses-items": ("/v1/responses", {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "tools": [{"type": "function", "name": "f", "parameters": {"b": 1, "a": None}}],
        "tool_choice": "required"}, ["930748aa19385cc65de46c7e70eda6f5"]),
    "messages-mcp": ("/v1/messages", {
        "max_tokens": 64, "messages": [{"role": "user", "content": "Add 1 and 2."}],
        "mcp_servers": [{"type": "url", "name": "calc", "url": "https://mcp.example.com"}],
        "tool_choice": {"type": "any"}}, ["325e62b073f137c59866e20a0a6daf51"]),
    "gemini": ("/v1beta/models/{model}:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "What is 2+2?"}]},
                     {"role": "model", "parts": [{"text": "4", "thought_signature": "YWJj-_8"}]},
                     {"role": "user", "parts": [{"text": "And 3+3?"}]}],
        "system_instruction": {"parts": [{"text": "Be brief."}]}, "tools": [],
        "generation_config": {"temperature": 0, "thinking_config": {"include_thoughts": True},
                              "response_mime_type": "text/plain"}},
        ["71abdca7044be94d17585d2fd468337e"]),
    "gemini_count": ("/v1beta/models/{model}:countTokens", {"generateContentRequest": {
        "model": "models/m", "contents": [{"role": "user", "parts": [{"text": "What is 2+2?"}]}]}},
        ["1d53f64cb1c455410869cb7b8f853f61"]),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_bytes_of_keys_are_pinned(name: str) -> None:
    """A change to how keys are computed that changes a key is a new KEY_VERSION: change
    these with it, never alone."""
    endpoint, body, pinned = PINNED[name]
    request = family_of(endpoint).parse(orjson.dumps(body))
    if not request.keys:
        request.key(None)  # (Responses: keyed once the model is known)
    assert keys.KEY_VERSION == 4
    assert [k.hex() for k in request.keys] == pinned


@pytest.mark.parametrize("endpoint", list(FAMILIES))
def test_every_family_keys_with_the_one_version_and_its_own_kind(endpoint: str) -> None:
    family = family_of(endpoint)
    body = PINNED[{"chat": "chat", "completions": "completion"}.get(family.name,
                                                                    family.name)][1]
    prompts = family.prompts(body, None)
    assert prompts and all(p["v"] == keys.KEY_VERSION and p["kind"] == family.kind
                           for p in prompts)
    assert len({f.kind for f in FAMILIES.values()}) == len(FAMILIES)


def test_a_value_that_normalises_to_its_unset_value_is_unset() -> None:
    assert chat_key(response_format={"type": "text", "json_schema": None}) == BASE
    assert chat_key(logit_bias={"50256": None}) == BASE
    assert chat_key(echo=True) != BASE and chat_key(echo=False) == BASE


# --- the one type check ------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=6)
OF = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
      dict: "object"}


def accepts(f: keys.Field, value: Any) -> bool:
    """The rule, written out: null, or one of the field's JSON types (an integer is a
    number; a boolean is neither), and an array's items of `items`'s type."""
    if value is None:
        return True
    kind = OF[type(value)]
    if not (kind in f.types or (kind == "integer" and "number" in f.types)):
        return False
    return not (kind == "array" and f.items) or all(OF.get(type(v)) == f.items for v in value)


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", list(FAMILIES))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_request_passes_the_type_check_when_every_known_field_has_its_type(
        endpoint: str, data: st.DataObject) -> None:
    table = family_of(endpoint).table
    names = sorted(table.by_name) + ["unknown_field"]
    body = orjson.loads(orjson.dumps(data.draw(st.dictionaries(st.sampled_from(names), JSON,
                                                               max_size=6))))
    wrong = [n for n, v in body.items() if n in table.by_name
             and not accepts(table.by_name[n], v)]
    try:
        table.check(body)
    except BadRequest as e:
        assert e.param in wrong and e.param is not None and f"`{e.param}` must be" in e.message
    else:
        assert not wrong


def test_the_docs_list_every_field_as_the_tables_classify_them() -> None:
    page = docs_page("reference/fields.md")
    assert fields_table(CHAT_PATH, COMPLETION_PATH) in page
    assert fields_table(RESPONSES_PATH) in page
    assert tuple(FAMILIES) == ENDPOINTS


def test_a_table_reads_every_request_through_its_form() -> None:
    """A family whose API spells a field two ways (or nests fields of different roles)
    gives its table the request's one form: the type check, the key and the sampling
    parameters all read the request through it."""
    def form(request: Any) -> dict[str, Any]:
        return {("topP" if k == "top_p" else k): v for k, v in request.items()}

    table = keys.Table("t", (keys.field("prompt", keys.KEY, "string", "the prompt"),
                             keys.field("style", keys.KEY, "string", "what it emits"),
                             keys.field("topP", keys.STRICT, "number", "sampling")),
                       own=("prompt",), form=form)
    with pytest.raises(BadRequest, match="`topP` must be a number"):
        table.check({"prompt": "p", "top_p": "high"})
    assert table.params({"top_p": 0.5}) == table.params({"topP": 0.5}) == b'{"topP":0.5}'
    assert table.prompt({"style": "s", "top_p": 1}, {"prompt": "p"}) == {
        "prompt": "p", "v": keys.KEY_VERSION, "kind": "t", "style": "s"}
