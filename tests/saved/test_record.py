"""The native record: what a saved line must hold, the error that names what is wrong with
it (`FILE:LINE: field `F`: reason`), and what a valid line becomes."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.errors import LoadError
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH
from replay_server.saved.record import (
    MARKER,
    TRANSPORT_FIELDS,
    Record,
    dump_line,
    make_record,
    validate,
)
from replay_server.wire.chat.stream_out import STREAM as CHAT_STREAM
from replay_server.wire.families import family_of
from replay_server.wire.responses.stream_out import events_for
from tests.support import ROOT, write_jsonl


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


def responses() -> dict[str, Any]:
    return {MARKER: 1, "endpoint": RESPONSES_PATH, "model": "m",
            "request": {"model": "m", "input": "hi"},
            "response": {"id": "resp", "object": "response", "status": "completed",
                         "output": [{"type": "message", "role": "assistant", "content": [
                             {"type": "output_text", "text": "x", "annotations": []}]}]},
            "source": {"instance": 3}}


def error_of(obj: Any) -> str:
    with pytest.raises(LoadError) as caught:
        validate(obj, "f.jsonl", 7)
    return str(caught.value)


def changed(base: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    change(obj)
    return obj


# (line, the error that names what is wrong with it)
BAD_LINES: list[tuple[Any, str]] = [
    ([1, 2], "f.jsonl:7: expected a JSON object, got a list"),
    (changed(chat(), lambda o: o.pop(MARKER)), "f.jsonl:7: field `replay_record`: missing"),
    (changed(chat(), lambda o: o.update({MARKER: True})),
     "f.jsonl:7: field `replay_record`: expected an integer, got a boolean"),
    (changed(chat(), lambda o: o.update({MARKER: 2})),
     "f.jsonl:7: field `replay_record`: record format version 2 is not supported (this "
     "replay-server reads version 1)"),
    (changed(chat(), lambda o: o.pop("endpoint")), "f.jsonl:7: field `endpoint`: missing"),
    (changed(chat(), lambda o: o.update(endpoint="/v1/embeddings")),
     "f.jsonl:7: field `endpoint`: expected one of /v1/chat/completions, /v1/completions, "
     "/v1/responses, /v1/messages, /v1/messages/count_tokens, "
     "/v1beta/models/{model}:generateContent, /v1beta/models/{model}:countTokens, /tokenize, "
     "/detokenize, /tokenizer_info, /v1/models, got '/v1/embeddings'"),
    (changed(chat(), lambda o: o.update(model=3)),
     "f.jsonl:7: field `model`: expected a string, got an integer"),
    (changed(chat(), lambda o: o.update(model="")),
     "f.jsonl:7: field `model`: must not be empty"),
    (changed(chat(), lambda o: o.update(request=None)),
     "f.jsonl:7: field `request`: expected an object, got null"),
    (changed(chat(), lambda o: o["request"].pop("messages")),
     "f.jsonl:7: field `request.messages`: missing"),
    (changed(chat(), lambda o: o["request"].update(messages="hi")),
     "f.jsonl:7: field `request.messages`: expected a list, got a string"),
    (changed(chat(), lambda o: o["request"].update(messages=[])),
     "f.jsonl:7: field `request.messages`: expected a non-empty list of message objects"),
    (changed(chat(), lambda o: o["request"]["messages"].append("q")),
     "f.jsonl:7: field `request.messages`: expected a non-empty list of message objects"),
    (completion(["a", "b"]),
     "f.jsonl:7: field `request.prompt`: expected one prompt: a string or a list of token "
     "ids (a batch is saved as one record per prompt)"),
    (changed(responses(), lambda o: o["request"].pop("input")),
     "f.jsonl:7: field `request.input`: expected a string or a list of input items"),
    (changed(chat(), lambda o: o.update(source=[])),
     "f.jsonl:7: field `source`: expected an object, got a list"),
    (changed(chat(), lambda o: o["source"].update(instance={"id": 1})),
     "f.jsonl:7: field `source.instance`: expected a string, a number or null, got an object"),
    (changed(chat(), lambda o: o.update(also_requests={})),
     "f.jsonl:7: field `also_requests`: expected a list of request objects"),
    (changed(chat(), lambda o: o.update(also_requests=[{"messages": []}])),
     "f.jsonl:7: field `also_requests[0].messages`: expected a non-empty list of message "
     "objects"),
    (changed(chat(), lambda o: o.update(batch={"id": "b", "index": 0, "size": 2})),
     "f.jsonl:7: field `batch`: expected an object, on a /v1/completions record only"),
    (changed(completion(), lambda o: o.update(batch={"id": 1, "index": 0, "size": 2})),
     "f.jsonl:7: field `batch.id`: expected a string"),
    (changed(completion(), lambda o: o.update(batch={"id": "b", "index": 2, "size": 2})),
     "f.jsonl:7: field `batch`: expected integers `size` and `index`, 0 <= index < size"),
    (changed(completion(), lambda o: o.update(batch={"id": "b", "index": 0, "size": 2,
                                                      "usage": 3})),
     "f.jsonl:7: field `batch.usage`: expected an object or null"),
    (changed(chat(), lambda o: o.update(response=None)),
     "f.jsonl:7: field `response`: is null, so `unusable` must say why"),
    (changed(chat(), lambda o: o.update(response=None, unusable="")),
     "f.jsonl:7: field `response`: is null, so `unusable` must say why"),
    (changed(chat(), lambda o: o.update(response="x")),
     "f.jsonl:7: field `response`: expected an object or null, got a string"),
    (changed(chat(), lambda o: o["response"].pop("choices")),
     "f.jsonl:7: field `response.choices`: missing"),
    (changed(chat(), lambda o: o["response"].update(choices=[])),
     "f.jsonl:7: field `response.choices`: expected a non-empty list of choice objects"),
    (changed(chat(), lambda o: o["response"]["choices"].append(None)),
     "f.jsonl:7: field `response.choices`: expected a non-empty list of choice objects"),
    (changed(chat(), lambda o: o["response"]["choices"][0].pop("message")),
     "f.jsonl:7: field `response.choices[0].message`: missing"),
    (changed(completion(), lambda o: o["response"]["choices"][0].pop("text")),
     "f.jsonl:7: field `response.choices[0].text`: missing"),
    (changed(chat(), lambda o: o["response"]["choices"][0]["message"].update(content=1)),
     "f.jsonl:7: field `response.choices[0].message.content`: expected a string, a list of "
     "content parts or null, got an integer"),
    (changed(chat(), lambda o: o["response"]["choices"][0]["message"].update(role=None,
                                                                             refusal=[])),
     "f.jsonl:7: field `response.choices[0].message.refusal`: expected a string or null, "
     "got a list"),
    (changed(chat(), lambda o: o["response"]["choices"][0]["message"].update(
        tool_calls=[{"function": "f"}])),
     "f.jsonl:7: field `response.choices[0].message.tool_calls`: expected a list of "
     "tool-call objects, each with a `function` object"),
    (changed(chat(2), lambda o: o["response"]["choices"][1]["message"].update(
        function_call="f")),
     "f.jsonl:7: field `response.choices[1].message.function_call`: expected an object or "
     "null, got a string"),
    (changed(chat(2), lambda o: o.update(sample_usage=[None])),
     "f.jsonl:7: field `sample_usage`: expected a list of 2 usage objects or nulls"),
    (changed(chat(), lambda o: o.update(sample_usage=[3])),
     "f.jsonl:7: field `sample_usage`: expected usage objects or nulls"),
    (changed(chat(), lambda o: o.update(stream=["data: {}\n\n", ""])),
     "f.jsonl:7: field `stream`: expected a non-empty list of SSE frames (strings)"),
    (changed(responses(), lambda o: o["response"].update(output={})),
     "f.jsonl:7: field `response.output`: expected a list, got an object"),
    (changed(responses(), lambda o: o["response"]["output"].append({"type": 1})),
     "f.jsonl:7: field `response.output[1]`: expected an item object with a string `type`"),
    (changed(responses(), lambda o: o["response"]["output"][0].update(content="x")),
     "f.jsonl:7: field `response.output[0].content`: expected a list of parts or null"),
    (changed(responses(), lambda o: o["response"].update(status=["failed"])),
     "f.jsonl:7: field `response.status`: expected a string or null, got a list"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_a_bad_line_is_named_with_its_field_and_reason(line: Any, message: str) -> None:
    assert error_of(line) == message


def test_readers_records_are_checked_as_saved_lines_are() -> None:
    with pytest.raises(LoadError) as caught:
        make_record(CHAT_PATH, "m", {"messages": []}, None, None, "x.json", None,
                    unusable="why")
    assert str(caught.value) == ("x.json: field `request.messages`: expected a non-empty "
                                 "list of message objects")


@pytest.mark.parametrize("line", [chat(), chat(2), chat(stream=True, user="u"), completion(),
                                  completion([1, 2], 3), responses()])
def test_a_valid_line_is_the_record_it_describes(line: dict[str, Any]) -> None:
    record = validate(copy.deepcopy(line), "f.jsonl", 7)
    assert (record.endpoint, record.model, record.response) == (
        line["endpoint"], "m", line["response"])
    assert record.request == {k: v for k, v in line["request"].items()
                              if k not in TRANSPORT_FIELDS}
    assert record.source == {"file": "f.jsonl", "line": 7, **(line["source"] or {})}
    assert record.unusable is None and record.origin == "f.jsonl"
    assert validate(orjson.loads(dump_line(record)), "g.jsonl", 1) == Record(
        **{**{s: getattr(record, s) for s in Record.__slots__}, "origin": "g.jsonl"})


def test_a_source_naming_its_own_file_and_line_keeps_them() -> None:
    line = changed(chat(), lambda o: o["source"].update(file="orig.json", line=3, run="r"))
    assert validate(line, "f.jsonl", 7).source == {
        "file": "orig.json", "line": 3, "harness": "h", "instance": "doc-0", "run": "r"}


def test_choices_are_put_in_index_order() -> None:
    line = chat(3)
    line["response"]["choices"].reverse()
    record = validate(line, "f.jsonl", 7)
    assert record.response is not None
    assert [c["message"]["content"] for c in record.response["choices"]] == ["a0", "a1", "a2"]
    unindexed = changed(chat(2), lambda o: [c.pop("index") for c in o["response"]["choices"]])
    record = validate(unindexed, "f.jsonl", 7)
    assert record.response is not None
    assert [c["index"] for c in record.response["choices"]] == [0, 1]
    odd = changed(chat(), lambda o: o["response"]["choices"][0].update(index=False))
    record = validate(odd, "f.jsonl", 7)
    assert record.response is not None
    assert [type(c["index"]) for c in record.response["choices"]] == [int]


@pytest.mark.parametrize(("line", "why"), [
    (changed(completion(), lambda o: o["response"]["choices"][0].update(text=None)),
     "saved text is null or missing"),
    (changed(chat(), lambda o: o["response"]["choices"][0].update(message=None)),
     "saved message is null or missing"),
    (changed(chat(), lambda o: o["response"]["choices"][0]["message"].update(content=None)),
     "saved message has no content, refusal, reasoning or tool calls"),
    (changed(responses(), lambda o: o["response"].update(status="failed",
                                                         error={"code": "x"})),
     "the saved response's status is 'failed': {\"code\":\"x\"}"),
    (changed(chat(), lambda o: o.update(response=None, unusable="the call failed")),
     "the call failed"),
])
def test_a_saved_answer_that_is_not_one_is_unusable_and_says_why(line: Any, why: str) -> None:
    assert validate(line, "f.jsonl", 7).unusable == why


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": ""}, {"role": "assistant", "content": None, "refusal": "no"},
    {"role": "assistant", "content": None, "reasoning": "hm"},
    {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}])
def test_an_empty_string_a_refusal_reasoning_or_a_tool_call_is_an_answer(
        message: dict[str, Any]) -> None:
    line = changed(chat(), lambda o: o["response"]["choices"][0].update(message=message))
    assert validate(line, "f.jsonl", 7).unusable is None


def streamed(text: str, saved: str | None = None) -> dict[str, Any]:
    """A recorded chat stream of `text`, saved with the body it aggregates to, or with the
    body of `saved` (its frames left as they were)."""
    line = changed(chat(), lambda o: o["response"].update(usage=None))
    line["response"]["choices"][0]["message"] = {"role": "assistant", "content": text}
    frames = b"".join(CHAT_STREAM.chunks(line["response"], False))
    line["response"] = family_of(CHAT_PATH).aggregate(frames)
    line["stream"] = [frames.decode()]
    if saved is not None:
        line["response"]["choices"][0]["message"]["content"] = saved
    return line


def responses_streamed(text: str, saved: str) -> dict[str, Any]:
    line = changed(responses(), lambda o: o["response"]["output"][0]["content"][0].update(
        text=text))
    line["stream"] = [f.decode() for f in events_for(line["response"])]
    line["response"]["output"][0]["content"][0]["text"] = saved
    return line


MISMATCH = ("field `stream`: the saved stream does not aggregate to the saved `response`: a "
            "streamed replay would send another answer than a plain one")


def test_a_recorded_stream_is_saved_with_the_body_it_aggregates_to() -> None:
    line = streamed("Hello there.")
    assert validate(copy.deepcopy(line), "f.jsonl", 7).stream == line["stream"]
    same = responses_streamed("Hello there.", "Hello there.")
    assert validate(copy.deepcopy(same), "f.jsonl", 7).stream == same["stream"]


@pytest.mark.parametrize("line", [streamed("Hello there.", saved="Hello!"),
                                  responses_streamed("Hello there.", "Hello!")])
def test_frames_that_say_another_thing_than_the_response_are_a_bad_line(line: Any) -> None:
    assert error_of(line) == f"f.jsonl:7: {MISMATCH}"


def test_frames_that_cannot_be_read_are_a_bad_line() -> None:
    line = {**streamed("Hello there."), "stream": ["data: {oops\n\n", "data: [DONE]\n\n"]}
    assert error_of(line).startswith("f.jsonl:7: field `stream`: the saved stream cannot be "
                                     "read: a stream event is not JSON")


@pytest.mark.slow
@pytest.mark.parametrize("command", [["inspect"], ["index", "-o", "{tmp}/x.index"],
                                     ["convert", "-o", "{tmp}/x.jsonl"],
                                     ["serve", "--port", "0"]])
def test_every_command_names_the_bad_stream_at_load(tmp_path: Path, command: list[str]
                                                     ) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat(), streamed("Hello there.", "Hello!")])
    argv = [command[0], str(path), *(a.format(tmp=tmp_path) for a in command[1:])]
    done = subprocess.run([sys.executable, "-m", "replay_server", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"{path}:2: {MISMATCH}" in done.stderr
    assert not list(tmp_path.glob("x.*"))


# Random saved lines, mutated from valid ones: each is a record or a LoadError naming the
# file, the line and the field, never anything else (a TypeError would be a traceback
# instead of the bad line's name).
VALUES: list[Any] = [None, True, 0, 1, -1, 1.0, "", "x", CHAT_PATH, COMPLETION_PATH,
                     RESPONSES_PATH, "failed", [], [1, 2], ["a"], [{}], [None], {},
                     {"content": "x"}, [{"role": "user", "content": "q"}],
                     {"type": "function", "function": {}}, [{"type": "text", "text": "x"}]]
NAMES = ["index", "message", "text", "content", "tool_calls", "function_call", "refusal",
         "role", "choices", "messages", "prompt", "input", "output", "status", "type",
         *sorted(TRANSPORT_FIELDS), "unusable", "batch", "sample_usage", "also_requests",
         "stream", "file", "line", "instance", "run", "source", "x"]
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
                    max_leaves=6)
VALUE = (st.sampled_from(VALUES) | JSON).map(copy.deepcopy)


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


@pytest.mark.slow
@settings(max_examples=400, deadline=None)  # (a shared machine: time is no signal)
@given(st.sampled_from([chat(), chat(2), completion(), completion([1, 2], 3), responses()]),
       st.integers(1, 4), st.data())
def test_any_line_is_a_record_or_a_precise_error(base: dict[str, Any], mutations: int,
                                                  data: st.DataObject) -> None:
    obj = copy.deepcopy(base)
    for _ in range(mutations):
        obj = mutate(obj, data)
    try:
        record = validate(obj, "f.jsonl", 7)
    except LoadError as error:
        assert str(error).startswith("f.jsonl:7: ")
        return
    assert record.endpoint in (CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH)
    assert record.response is not None or record.unusable


@pytest.mark.parametrize(("endpoint", "request_", "response", "message"), [
    ("/tokenize", {"prompt": 3}, {"count": 0, "tokens": []},
     "field `request`: `prompt` must be a string, got an integer"),
    ("/tokenize", {"prompt": "a"}, {"count": 2, "tokens": [1]},
     "field `response`: `count` must be the number of `tokens`"),
    ("/detokenize", {"tokens": [1]}, {"text": "a"}, "field `response`: `prompt` must be"),
    ("/v1/models", {}, {"id": "other"}, "field `response`: expected the model's entry"),
    ("/v1/models", {}, {"id": "m", "max_model_len": "4k"},
     "field `response`: `max_model_len` must be an integer"),
])
def test_a_bad_record_of_no_generation_is_named_with_its_field(
        endpoint: str, request_: dict[str, Any], response: Any, message: str) -> None:
    line = {MARKER: 1, "endpoint": endpoint, "model": "m", "request": request_,
            "response": response}
    with pytest.raises(LoadError) as e:
        validate(line, "f.jsonl", 7)
    assert str(e.value).startswith(f"f.jsonl:7: {message}")


def test_records_of_no_generation_round_trip() -> None:
    for endpoint, request_, response in [
            ("/tokenize", {"prompt": "a"}, {"count": 1, "max_model_len": 8, "tokens": [5]}),
            ("/tokenizer_info", {}, {"tokenizer_class": "X"}),
            ("/v1/models", {}, {"id": "m", "object": "model", "max_model_len": 8})]:
        record = validate({MARKER: 1, "endpoint": endpoint, "model": "m",
                           "request": request_, "response": response}, "f.jsonl", 1)
        assert validate(orjson.loads(dump_line(record)), "f.jsonl", 1).response == response
