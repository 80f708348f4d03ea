"""Issue 20, round 3, the wire items: chat `echo` keyed; a deeply nested value is a 400
naming its field; the usage chunk goes right before the final `data: [DONE]` frame."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from replay_server.errors import BadRequest, NoMatch
from replay_server.index.samples import Rules
from replay_server.paths import (
    CHAT_PATH,
    COMPLETION_PATH,
    COUNT_TOKENS_PATH,
    GEMINI_COUNT_PATH,
    GEMINI_PATH,
    MESSAGES_PATH,
    RESPONSES_PATH,
)
from replay_server.replay.replayer import Replayer
from replay_server.saved.record import validate
from replay_server.wire.chat.stream_out import STREAM
from replay_server.wire.families import FAMILIES
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    gemini_contents,
    gemini_record,
    gemini_response,
    message_record,
    message_response,
)

QUESTION = {"role": "user", "content": "What is 2+2?"}
PREFILL = {"role": "assistant", "content": "The answer is"}


def chat_body(**fields: Any) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": [QUESTION, PREFILL], **fields})


def test_chat_echo_is_keyed() -> None:
    """vLLM prepends the prefilled assistant message with `echo`: the saved answer of an
    echo request is not the answer of a request without it, and the reverse."""
    with_echo = chat_record([QUESTION, PREFILL], chat_response("The answer is 4."), echo=True)
    without = chat_record([QUESTION, PREFILL], chat_response(" 4."), line=2)
    for saved, asked, other in ((with_echo, True, False), (without, False, True)):
        replayer = Replayer(build([saved]), Rules())
        got = orjson.loads(replayer.handle(CHAT_PATH, chat_body(echo=asked)).body)
        assert got["choices"][0]["message"]["content"] == (
            "The answer is 4." if asked else " 4.")
        with pytest.raises(NoMatch):
            replayer.handle(CHAT_PATH, chat_body(echo=other))
    replayer = Replayer(build([without]), Rules())
    assert replayer.handle(CHAT_PATH, chat_body(echo=False)).body  # false is unset


def nested(depth: int, leaf: bytes = b"1") -> bytes:
    """A JSON object `depth` deep (orjson parses up to 1024 levels, writes up to 255)."""
    return b'{"a":' * depth + leaf + b"}" * depth


def with_field(endpoint: str, name: str, value: bytes, extra: dict[str, Any] | None = None
               ) -> bytes:
    bases: dict[str, dict[str, Any]] = {
        CHAT_PATH: {"model": MODEL, "messages": [QUESTION]},
        COMPLETION_PATH: {"model": MODEL, "prompt": "q"},
        RESPONSES_PATH: {"model": MODEL, "input": "q"},
        MESSAGES_PATH: {"model": MODEL, "messages": [QUESTION]},
        COUNT_TOKENS_PATH: {"model": MODEL, "messages": [QUESTION]},
        GEMINI_PATH: {"contents": gemini_contents("q"), "labels": {}},
        GEMINI_COUNT_PATH: {"contents": gemini_contents("q"), "labels": {}}}
    base = {**bases[endpoint], **(extra or {})}
    head = orjson.dumps({k: v for k, v in base.items() if k != name})[:-1]
    return head + b',"' + name.encode() + b'":' + value + b"}"


def saved_replayer(strict: bool = False) -> Replayer:
    records = [chat_record([QUESTION], chat_response("4")),
               completion_record("q", completion_response("4"), line=2),
               validate({"replay_record": 1, "endpoint": RESPONSES_PATH, "model": MODEL,
                         "request": {"model": MODEL, "input": "q"},
                         "response": {"id": "resp_1", "object": "response", "model": MODEL,
                                      "status": "completed", "output": [], "usage": None},
                         "source": {"file": "saved.jsonl", "line": 3}}, "saved.jsonl", 3),
               message_record([QUESTION], message_response("4"), line=4),
               message_record([QUESTION], {"input_tokens": 3}, line=5,
                              endpoint=COUNT_TOKENS_PATH),
               gemini_record("q", gemini_response("4"), line=6),
               gemini_record("q", {"totalTokens": 3}, line=7, endpoint=GEMINI_COUNT_PATH)]
    return Replayer(build(records), Rules(strict=strict))


ANTHROPIC_TOOL = {"name": "f", "input_schema": {"type": "object"}}
GEMINI_TOOL = {"functionDeclarations": [{"name": "f"}]}
TOOL = {CHAT_PATH: {"type": "function", "function": {"name": "f"}},
        RESPONSES_PATH: {"type": "function", "name": "f"},
        MESSAGES_PATH: ANTHROPIC_TOOL, COUNT_TOKENS_PATH: ANTHROPIC_TOOL,
        GEMINI_PATH: GEMINI_TOOL, GEMINI_COUNT_PATH: GEMINI_TOOL}
# where a deeply nested value can go in the prompt fields a request must send
IN_PROMPT = {"messages": lambda deep: b'[{"role":"user","content":' + deep + b"}]",
             "input": lambda deep: b'[{"role":"user","content":' + deep + b"}]",
             "contents": lambda deep: b'[{"role":"user","parts":[{"text":"q","x":' + deep
             + b"}]}]"}


def deep_cases() -> list[tuple[str, str, bytes, dict[str, Any]]]:
    """Every key field of every family that can nest (an object or a list), a value
    nested deeply in it, and what else the request needs for the field to count."""
    cases = []
    for endpoint, family in FAMILIES.items():
        for f in family.table.fields:
            if f.role != "key" or not {"object", "array"} & set(f.types):
                continue
            for depth in (300, 1000):
                deep = nested(depth) if "object" in f.types else b"[" + nested(depth) + b"]"
                if f.name in IN_PROMPT:
                    deep = IN_PROMPT[f.name](nested(depth))
                elif f.name == "prompt" and endpoint == COMPLETION_PATH:
                    continue  # strings or token ids only: a 400 for its form
                extra = {"tools": [TOOL[endpoint]]} if f.needs else {}
                cases.append((endpoint, f.name, deep, extra))
    return cases


@pytest.mark.parametrize("endpoint, name, value, extra", deep_cases(),
                         ids=[f"{e}:{n}:{len(v)}" for e, n, v, _ in deep_cases()])
def test_a_deeply_nested_key_field_is_a_400_naming_it(
        endpoint: str, name: str, value: bytes, extra: dict[str, Any]) -> None:
    replayer = saved_replayer()
    with pytest.raises(BadRequest) as caught:
        replayer.handle(endpoint, with_field(endpoint, name, value, extra))
    assert caught.value.status == 400 and caught.value.param == name, caught.value.message


STRICT_DEEP = [(e, f.name) for e, family in FAMILIES.items() for f in family.table.fields
               if f.role == "strict" and {"object", "array"} & set(f.types) and not f.items]


@pytest.mark.parametrize("endpoint, name", STRICT_DEEP + [
    (e, "an_unknown_field") for e in FAMILIES])
@pytest.mark.parametrize("depth", [300, 1000])
def test_a_deeply_nested_sampling_param_is_a_400_naming_it_under_strict(
        endpoint: str, name: str, depth: int) -> None:
    replayer = saved_replayer(strict=True)
    with pytest.raises(BadRequest) as caught:
        replayer.handle(endpoint, with_field(endpoint, name, b"[" + nested(depth) + b"]"))
    assert caught.value.status == 400 and caught.value.param == name, caught.value.message


def test_a_miss_nested_nearly_as_deep_as_a_key_can_be_says_where_it_differs() -> None:
    """The miss diagnostics (nearest prompt, first difference) take what a key takes."""
    saved = chat_record([{"role": "user", "content": orjson.loads(nested(240, b"1"))}],
                        chat_response("4"))
    replayer = Replayer(build([saved]), Rules())
    with pytest.raises(NoMatch) as caught:
        replayer.handle(CHAT_PATH, b'{"model":"' + MODEL.encode() + b'","messages":'
                        + IN_PROMPT["messages"](nested(240, b"2")) + b"}")
    assert "message 0 (user)" in caught.value.message


def streamed(replayer: Replayer, include_usage: bool) -> bytes:
    return replayer.handle(CHAT_PATH, orjson.dumps({
        "model": MODEL, "messages": [QUESTION], "stream": True,
        "stream_options": {"include_usage": include_usage}})).body


def test_the_usage_chunk_goes_before_the_final_done_frame_not_a_text_holding_done() -> None:
    """A delta whose text is `[DONE]` (one token, as an upstream streams it) is no end."""
    tokens = ["The stream ends with ", "data: [DONE]", "."]
    logprobs: dict[str, Any] = {"content": [
        {"token": t, "logprob": -0.1, "bytes": None, "top_logprobs": []} for t in tokens]}
    body = chat_response("".join(tokens), usage=None)
    body["choices"][0]["logprobs"] = logprobs
    frames = list(STREAM.chunks(body, False))
    assert any(b'"content":"data: [DONE]"' in f for f in frames)
    record = validate({"replay_record": 1, "endpoint": CHAT_PATH, "model": MODEL,
                       "request": {"model": MODEL, "messages": [QUESTION]},
                       "response": body, "stream": [f.decode() for f in frames],
                       "source": {"file": "saved.jsonl", "line": 1}}, "saved.jsonl", 1)
    sent = streamed(Replayer(build([record]), Rules()), True)
    usage = b'"choices":[],"usage":null}\n\n'
    assert sent.endswith(usage + b"data: [DONE]\n\n"), sent[-300:]
    assert sent.count(usage) == 1


def test_a_usage_field_on_a_content_chunk_is_no_usage_chunk() -> None:
    """A recording whose usage rode on its last content chunk (choices not empty) did not
    carry the usage chunk that `include_usage` asks for: a request asking gets one."""
    frames = b"".join(STREAM.chunks(chat_response("a b", usage=None), False))
    inline = frames.replace(b'"finish_reason":"stop"}]}', b'"finish_reason":"stop"}],'
                            b'"usage":{"prompt_tokens":1,"completion_tokens":2,'
                            b'"total_tokens":3}}')
    assert inline != frames
    parts = [p + b"\n\n" for p in inline.split(b"\n\n") if p]
    body = chat_response("a b", usage={"prompt_tokens": 1, "completion_tokens": 2,
                                      "total_tokens": 3})
    record = validate({"replay_record": 1, "endpoint": CHAT_PATH, "model": MODEL,
                       "request": {"model": MODEL, "messages": [QUESTION]},
                       "response": body, "stream": [f.decode() for f in parts],
                       "source": {"file": "saved.jsonl", "line": 1}}, "saved.jsonl", 1)
    replayer = Replayer(build([record]), Rules())
    sent = streamed(replayer, True)
    assert sent.endswith(b'"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,'
                         b'"total_tokens":3}}\n\ndata: [DONE]\n\n'), sent[-300:]
    assert streamed(replayer, False) == inline
