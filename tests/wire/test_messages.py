"""Anthropic's Messages family as pure functions: its keys (what matches, and the near
misses that must not), its streams out and in, its error envelope."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from replay_server.errors import BadRequest, NoMatch, Unauthorized
from replay_server.paths import COUNT_TOKENS_PATH, MESSAGES_PATH
from replay_server.wire import keys
from replay_server.wire.families import family_of
from replay_server.wire.messages import stream_in, stream_out
from replay_server.wire.messages.envelope import error_body
from replay_server.wire.sse import StreamError
from tests.support import message_response

FAMILY = family_of(MESSAGES_PATH)


def key(body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> bytes:
    base = {"model": "m", "max_tokens": 100, **body}
    return FAMILY.parse(orjson.dumps(base), headers or []).keys[0]


HELLO = [{"role": "user", "content": "Hello"}]


def test_one_text_block_is_the_plain_string() -> None:
    blocks = [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    assert key({"messages": blocks}) == key({"messages": HELLO})
    assert key({"messages": HELLO, "system": [{"type": "text", "text": "Be brief."}]}) \
        == key({"messages": HELLO, "system": "Be brief."})
    # nulls in a block are unset, as a client echoing a response's blocks sends them
    nulls = [{"role": "user", "content": [{"type": "text", "text": "Hello", "citations": None}]}]
    assert key({"messages": nulls}) == key({"messages": HELLO})


@pytest.mark.parametrize("other", [
    {"messages": [{"role": "user", "content": "Hello "}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                {"type": "text", "text": "!"}]}]},
    {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}]}]},
    {"messages": HELLO, "system": "Be brief."},
    {"messages": HELLO, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"messages": HELLO, "stop_sequences": ["\n\n"]},
    {"messages": HELLO, "output_format": {"type": "json_schema", "schema": {"type": "object"}}},
    {"messages": HELLO, "tools": [{"name": "add", "input_schema": {"type": "object"}}]},
])
def test_what_the_model_sees_or_may_emit_is_keyed(other: dict[str, Any]) -> None:
    assert key(other) != key({"messages": HELLO})


def test_sampling_and_bookkeeping_are_not_keyed() -> None:
    plain = key({"messages": HELLO})
    assert key({"messages": HELLO, "temperature": 0.5, "top_k": 3, "top_p": 0.9,
                "max_tokens": 7, "metadata": {"user_id": "u"}, "stream": True}) == plain
    assert key({"messages": HELLO, "stop_sequences": [], "tools": [],
                "thinking": {"type": "disabled"},
                "tool_choice": {"type": "any"}}) == plain  # tool_choice without tools
    assert key({"messages": HELLO}, [(b"anthropic-version", b"2023-06-01")]) == plain


MCP = [{"type": "url", "name": "calc", "url": "https://mcp.example.com/sse"}]
TOOL = [{"name": "add", "input_schema": {"type": "object"}}]


@pytest.mark.parametrize("tools", [{"tools": TOOL}, {"mcp_servers": MCP},
                                   {"tools": TOOL, "mcp_servers": MCP}],
                         ids=["tools", "mcp_servers", "both"])
def test_tool_choice_is_keyed_whichever_field_gives_the_tools(tools: dict[str, Any]) -> None:
    """An MCP server's tools are tools: forcing a call to one is not a plain answer."""
    plain = key({"messages": HELLO, **tools})
    assert key({"messages": HELLO, **tools, "tool_choice": {"type": "any"}}) != plain
    assert key({"messages": HELLO, **tools, "tool_choice": {"type": "none"}}) != plain
    assert key({"messages": HELLO, **tools, "tool_choice": {"type": "auto"}}) == plain


def test_the_beta_header_is_keyed_its_names_in_any_order() -> None:
    one = key({"messages": HELLO}, [(b"anthropic-beta", b"a-1,b-2")])
    assert one != key({"messages": HELLO})
    assert one == key({"messages": HELLO}, [(b"anthropic-beta", b"b-2, a-1")])
    assert one == key({"messages": HELLO}, [(b"anthropic-beta", b"a-1"),
                                            (b"anthropic-beta", b"b-2")])
    assert one == key({"messages": HELLO, "anthropic-beta": ["b-2", "a-1"]})


def test_thinking_signatures_and_tool_inputs_are_kept_exactly() -> None:
    def turn(signature: str, call: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [*HELLO, {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": signature},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": call}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [{"type": "text", "text": "4"}]}]}]}
    same = key(turn("sig", {"a": 2, "b": 2}))
    assert same != key(turn("sig2", {"a": 2, "b": 2}))
    assert same != key(turn("sig", {"b": 2, "a": 2}))  # the call the model wrote, in order


def test_count_tokens_is_keyed_apart_from_messages() -> None:
    count = family_of(COUNT_TOKENS_PATH).parse(orjson.dumps({"model": "m", "messages": HELLO}))
    assert count.keys[0] != key({"messages": HELLO})
    with pytest.raises(BadRequest, match="stream"):
        family_of(COUNT_TOKENS_PATH).parse(orjson.dumps(
            {"model": "m", "messages": HELLO, "stream": True}))


@pytest.mark.parametrize("body, param", [
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": "m", "messages": HELLO, "max_tokens": "10"}, "max_tokens"),
    ({"model": "m", "messages": HELLO, "system": 3}, "system"),
])
def test_a_bad_request_names_its_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as e:
        FAMILY.parse(orjson.dumps(body))
    assert e.value.param == param


BLOCKS: list[dict[str, Any]] = [
    {"type": "thinking", "thinking": "Two plus two.\nIs four.", "signature": "EqQBCkgIARAB=="},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="},
    {"type": "text", "text": "The answer is 4, as ever.", "citations": [
        {"type": "char_location", "cited_text": "4", "document_index": 0,
         "start_char_index": 0, "end_char_index": 1}]},
    {"type": "tool_use", "id": "toolu_01", "name": "add",
     "input": {"b": 2, "a": [1, {"x": "é"}]}},
    {"type": "tool_use", "id": "toolu_02", "name": "now", "input": {}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
]


def test_a_saved_message_streams_in_small_deltas_that_add_up_to_it() -> None:
    message = message_response(*BLOCKS, stop="tool_use")
    message["usage"] = {**message["usage"], "cache_creation": {"ephemeral_5m_input_tokens": 3},
                        "server_tool_use": {"web_search_requests": 1}}
    stream = stream_out.stream_for(message)
    assert stream_in.aggregate(stream) == message
    events = stream_out.events_for(message)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas.count("text_delta") > 3 and deltas.count("thinking_delta") > 3
    assert deltas.count("signature_delta") == 1 and deltas.count("citations_delta") == 1
    assert deltas.count("input_json_delta") > 3
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 1
    assert events[-2]["usage"] == {"output_tokens": 7, "input_tokens": 12,
                                   "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 0,
                                   "server_tool_use": {"web_search_requests": 1}}
    for frame in stream.split(b"\n\n")[:-1]:  # every frame names its event, as the API's
        name, data = frame.split(b"\n")
        assert name == b"event: " + orjson.loads(data.removeprefix(b"data: "))["type"].encode()


def test_a_stream_in_tolerates_pings_and_unknown_events() -> None:
    message = message_response("Hi there")
    frames = stream_out.stream_for(message).split(b"\n\n")
    odd = [frames[0], b"event: ping\ndata: {\"type\": \"ping\"}",
           b"event: brand_new\ndata: {\"type\": \"brand_new\", \"x\": 1}", *frames[1:]]
    assert stream_in.aggregate(b"\n\n".join(odd)) == message


ERROR = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'


@pytest.mark.parametrize("cut, why", [
    (lambda s: s[: s.index(b"event: message_stop")], "message_stop"),
    (lambda s: s.replace(b'"index":0', b'"index":5', 1), "not started"),
    (lambda s: s[: s.index(b"event: message_stop")] + ERROR, "overloaded_error"),
])
def test_a_stream_that_is_no_answer_is_a_stream_error(cut: Any, why: str) -> None:
    stream = stream_out.stream_for(message_response("Hi there"))
    with pytest.raises(StreamError, match=why):
        stream_in.aggregate(cut(stream))


def test_the_error_envelope_is_anthropics() -> None:
    body = error_body(NoMatch("no saved generation for this prompt", param="messages"))
    assert body == {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "replay_no_match: no saved generation for this prompt"}}
    assert error_body(Unauthorized("no key"))["error"]["type"] == "authentication_error"
    # phrases harnesses turn into scored answers are defused here too
    assert "prompt is too long" not in error_body(BadRequest("prompt is too long"))[
        "error"]["message"]


def test_keys_are_pinned() -> None:
    prompt = FAMILY.parse(orjson.dumps({"model": "m", "messages": HELLO})).prompts[0]
    assert keys.canonical(prompt) == \
        b'{"kind":"messages","messages":[{"content":"Hello","role":"user"}],"v":4}'
