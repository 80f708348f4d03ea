"""The Responses API: token-sized deltas, the stream in and out, the key, and real clients."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from replay_server.wire import keys
from replay_server.wire.pieces import split_deltas
from replay_server.wire.responses import fields, stream_in, stream_out
from replay_server.wire.responses import request as responses
from replay_server.wire.responses.request import keyed_input
from replay_server.wire.sse import StreamError
from tests.fakemodel.server import create_app as fake_model
from tests.support import running

MODEL = "tiny-model"
CALCULATOR: Any = {"type": "function", "name": "calculator", "description": "Evaluates arithmetic.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                             "required": ["expression"]}}


# --------------------------------------------------------------------------- saved bodies


def response(*output: dict[str, Any], status: str = "completed", rid: str = "resp_1",
             **extra: Any) -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": 1767225600, "status": status,
            "model": MODEL, "output": list(output), "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "incomplete_details": None,
            "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 4},
                      "total_tokens": 21}, **extra}


def message(text: str, mid: str = "msg_1", **part: Any) -> dict[str, Any]:
    return {"id": mid, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": [], **part}]}


def reasoning(text: str, rid: str = "rs_1", summary: list[str] | None = None) -> dict[str, Any]:
    return {"id": rid, "type": "reasoning",
            "summary": [{"type": "summary_text", "text": s} for s in summary or []],
            "content": [{"type": "reasoning_text", "text": text}], "status": None}


def call(arguments: str, fid: str | None = "fc_1") -> dict[str, Any]:
    item = {"type": "function_call", "call_id": "call_1", "name": "calculator",
            "arguments": arguments, "status": "completed"}
    return item if fid is None else {"id": fid, **item}


TEXT = response(message("The answer is 19."))
REASONING = response(reasoning("12 plus 7 is 19."), message("The answer is 19.", "msg_2"))
CALL = response(call('{"expression": "12 + 7"}'))
SAVED = {"text": TEXT, "reasoning": REASONING, "function_call": CALL}


def payloads(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for f in frames:
        head, data = f.split(b"\n", 1)
        event = orjson.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + event["type"].encode()
        out.append(event)
    return out


# --------------------------------------------------------------------------- split_deltas


@given(st.text())
def test_split_deltas_join_back_exactly(text: str) -> None:
    pieces = split_deltas(text)
    assert "".join(pieces) == text
    assert all(pieces)
    assert (pieces == []) == (text == "")


@given(st.text())
def test_split_deltas_are_word_pieces_with_their_leading_whitespace(text: str) -> None:
    pieces = split_deltas(text)
    for piece in pieces[:-1]:
        assert re.fullmatch(r"\s*\S+", piece), piece
    for piece in pieces:
        assert len(piece.strip()) <= 16
    if len(text.split()) >= 2:
        assert len(pieces) >= 2


def test_split_deltas_examples() -> None:
    assert split_deltas("The answer is 19.") == ["The", " answer", " is", " 19", "."]
    assert split_deltas("  lead\n\ntrail \n") == ["  lead", "\n\ntrail \n"]
    assert split_deltas(" ") == [" "]
    assert split_deltas("") == []
    assert split_deltas("x" * 40) == ["x" * 16, "x" * 16, "x" * 8]


# --------------------------------------------------------------------------- events_for


@pytest.mark.parametrize("saved", SAVED.values(), ids=SAVED.keys())
def test_events_for_aggregates_back_to_the_saved_response(saved: dict[str, Any]) -> None:
    frames = stream_out.events_for(saved)
    got = stream_in.aggregate(b"".join(frames))
    assert got.response == saved
    assert got.frames == frames
    assert got.events == payloads(frames)
    assert [e["sequence_number"] for e in got.events] == list(range(len(frames)))


def test_events_for_a_text_answer() -> None:
    events = payloads(stream_out.events_for(TEXT))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 5,
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == [] and events[0]["response"]["usage"] is None
    assert events[2]["item"] == {**TEXT["output"][0], "status": "in_progress", "content": []}
    assert events[3]["part"] == {"type": "output_text", "text": "", "annotations": []}
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["The", " answer", " is", " 19", "."]
    assert all(d["item_id"] == "msg_1" and d["output_index"] == 0 and d["content_index"] == 0
               and d["logprobs"] == [] for d in deltas)
    assert events[-1]["response"] == TEXT


def test_events_for_reasoning_then_text_and_a_function_call() -> None:
    types = [e["type"] for e in payloads(stream_out.events_for(REASONING))]
    assert types.count("response.reasoning_text.delta") == 6
    assert types.index("response.reasoning_text.done") < types.index(
        "response.output_text.delta")
    events = payloads(stream_out.events_for(CALL))
    args = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert len(args) > 3 and "".join(a["delta"] for a in args) == '{"expression": "12 + 7"}'
    added = events[2]["item"]
    assert added["arguments"] == "" and added["status"] == "in_progress"
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == CALL["output"][0]["arguments"]


def test_saved_logprobs_stream_token_by_token() -> None:
    tokens = [{"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []}
              for t in ["The", " answer", " is", " 19."]]
    saved = response(message("The answer is 19.", logprobs=tokens))
    events = payloads(stream_out.events_for(saved))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["The", " answer", " is", " 19."]
    assert [d["logprobs"] for d in deltas] == [[t] for t in tokens]
    assert stream_in.aggregate(stream_out.events_for(saved)).response == saved


def test_incomplete_responses_end_like_vllm_or_like_openai() -> None:
    saved = response(reasoning("12 plus"), status="incomplete",
                     incomplete_details={"reason": "max_output_tokens"})
    assert payloads(stream_out.events_for(saved))[-1]["type"] == "response.completed"
    by_status = stream_out.events_for(saved, terminal_by_status=True)
    assert payloads(by_status)[-1]["type"] == "response.incomplete"
    assert stream_in.aggregate(by_status).response == saved
    assert payloads(stream_out.events_for(saved))[0]["response"]["incomplete_details"] is None


_texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
_items = st.one_of(
    st.builds(message, _texts, st.sampled_from(["msg_a", "msg_b"])),
    st.builds(reasoning, _texts, st.just("rs_a"), st.lists(_texts, max_size=2)),
    st.builds(call, _texts, st.sampled_from([None, "fc_a"])),
    st.builds(lambda r: {"id": "msg_r", "type": "message", "role": "assistant",
                         "status": "completed", "content": [{"type": "refusal", "refusal": r}]},
              _texts),
    st.just({"id": "ws_1", "type": "web_search_call", "status": "completed",
             "action": {"type": "search", "query": "q"}}),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_items, max_size=4), st.sampled_from(["completed", "incomplete"]),
       st.lists(st.integers(0, 10_000), max_size=8), st.booleans())
def test_any_saved_response_survives_the_round_trip(
        output: list[dict[str, Any]], status: str, cuts: list[int], crlf: bool) -> None:
    saved = response(*output, status=status)
    stream = b"".join(stream_out.events_for(saved, terminal_by_status=True))
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    got = stream_in.aggregate(chunks)
    assert got.response == saved
    assert b"".join(got.frames) == stream


# --------------------------------------------------------------------------- the aggregator


def test_aggregate_says_done_at_the_terminal_event_and_tolerates_done_marker() -> None:
    frames = stream_out.events_for(TEXT)
    agg = stream_in.ResponsesStreamAggregator()
    assert not agg.feed(b"".join(frames[:-1]))
    assert agg.feed(frames[-1] + b"data: [DONE]\n\n")
    agg.finish()
    assert agg.result() == TEXT
    assert agg.frames[-1] == b"data: [DONE]\n\n" and len(agg.events) == len(frames)


def test_a_completed_event_without_output_takes_the_done_items() -> None:
    events = payloads(stream_out.events_for(REASONING))
    events[-1]["response"] = {k: v for k, v in REASONING.items() if k != "output"}
    assert stream_in.aggregate(b"".join(map(stream_out.frame, events))).response == REASONING


def test_vllm_streams_items_under_other_ids_than_the_final_body() -> None:
    events = payloads(stream_out.events_for(REASONING))
    for e in events[2:-1]:
        if "item_id" in e:
            e["item_id"] = "0f3a" + e["item_id"]
        if "item" in e:
            e["item"] = {**e["item"], "id": "0f3a" + e["item"]["id"]}
    assert stream_in.aggregate(b"".join(map(stream_out.frame, events))).response == REASONING


@pytest.mark.parametrize("where", ["delta", "done item", "final"])
def test_deltas_that_disagree_with_the_final_response_are_refused(where: str) -> None:
    events = payloads(stream_out.events_for(REASONING))
    if where == "delta":
        next(e for e in events if e["type"] == "response.output_text.delta")["delta"] = "A"
    elif where == "done item":
        done = [e for e in events if e["type"] == "response.output_item.done"][-1]
        done["item"] = message("The answer is 20.", "msg_2")
    else:
        events[-1]["response"] = response(REASONING["output"][0], message("Other.", "msg_2"))
    stream = b"".join(map(stream_out.frame, events))
    with pytest.raises(StreamError, match="does not match"):
        stream_in.aggregate(stream)
    assert stream_in.aggregate(stream, check=False).response == events[-1]["response"]


@pytest.mark.parametrize("tail, reason", [
    (b'event: error\ndata: {"type":"error","sequence_number":3,"code":"server_error",'
     b'"message":"boom","param":null}\n\n', "carried an error"),
    (stream_out.frame({"type": "response.failed", "sequence_number": 3, "response": response(
        status="failed", error={"code": "server_error", "message": "boom"})}), "boom"),
    (b"", "ended before"),
    (b"data: {not json}\n\n", "not JSON"),
])
def test_streams_that_are_no_answer_are_refused(tail: bytes, reason: str) -> None:
    stream = b"".join(stream_out.events_for(TEXT)[:3]) + tail
    with pytest.raises(StreamError, match=reason):
        stream_in.aggregate(stream)


# --------------------------------------------------------------------------- the fake upstream


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("wire") / "wire.jsonl"
    with running(fake_model([MODEL], log_path=str(log))) as url:
        yield url, log


def without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k not in ("id", "created_at")}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


FAKE_REQUESTS: dict[str, dict[str, Any]] = {
    "text": {"input": "What is 12 + 7?", "instructions": "Be brief."},
    # this prompt's hash gives the fake model a `reasoning` field
    "reasoning": {"input": [{"role": "user", "content": "What is 2 + 2?"}]},
    "function_call": {"input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Please use the calculator: what is 6 * 7?"}]}],
        "tools": [CALCULATOR]},
    "cut": {"input": "What is 2 + 2?", "max_output_tokens": 3},
    "no question": {"input": "Hello there"},
}


@pytest.mark.http
@pytest.mark.parametrize("name", FAKE_REQUESTS)
def test_fake_upstream_streams_aggregate_to_its_plain_answer(
        upstream: tuple[str, Path], name: str) -> None:
    url, _ = upstream
    body = {"model": MODEL, "temperature": 0, **FAKE_REQUESTS[name]}
    plain = httpx.post(url + "/responses", json=body).json()
    chunks: list[bytes] = []
    with httpx.stream("POST", url + "/responses", json={**body, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks.extend(r.iter_raw())
    got = stream_in.aggregate(chunks)
    assert without_ids(got.response) == without_ids(plain)
    assert got.events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in got.events] == list(range(len(got.events)))
    # and a replay of the plain answer is the same stream, ids and delta cuts aside
    replayed = stream_in.aggregate(stream_out.events_for(plain))
    assert replayed.response == plain
    assert ([e["type"] for e in replayed.events if not e["type"].endswith(".delta")]
            == [e["type"] for e in got.events if not e["type"].endswith(".delta")])


@pytest.mark.http
def test_fake_upstream_answers_as_its_chat_path_does(upstream: tuple[str, Path]) -> None:
    url, _ = upstream
    types = {}
    for name, request in FAKE_REQUESTS.items():
        out = httpx.post(url + "/responses",
                         json={"model": MODEL, "temperature": 0, **request}).json()
        types[name] = ([o["type"] for o in out["output"]], out["status"])
        assert out["usage"]["total_tokens"] == (out["usage"]["input_tokens"]
                                                + out["usage"]["output_tokens"])
    assert types == {"text": (["message"], "completed"),
                     "reasoning": (["reasoning", "message"], "completed"),
                     "function_call": (["function_call"], "completed"),
                     "cut": (["reasoning"], "incomplete"),
                     "no question": (["message"], "completed")}


@pytest.mark.http
def test_fake_upstream_stores_and_continues_responses(upstream: tuple[str, Path]) -> None:
    url, log = upstream
    with openai.OpenAI(base_url=url, api_key="x") as client:
        first = client.responses.create(model=MODEL, input=FAKE_REQUESTS["function_call"]["input"],
                                        tools=[CALCULATOR], temperature=0)
        (fc,) = first.output
        assert fc.type == "function_call" and json.loads(fc.arguments) == {"expression": "6 * 7"}
        assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
        second = client.responses.create(
            model=MODEL, previous_response_id=first.id, tools=[CALCULATOR], temperature=0,
            input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "42"}])
        assert second.output_text == "The answer is 42." and second.previous_response_id == first.id
        unstored = client.responses.create(model=MODEL, input="What is 1 + 1?", store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model=MODEL, input="hi", previous_response_id="resp_nope")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    gets = [line for line in lines if line.get("method") == "GET"]
    assert gets and gets[0]["path"] == f"/v1/responses/{first.id}"
    assert any(line["request"] and line["request"].get("previous_response_id") == first.id
               for line in lines)


# --------------------------------------------------------------------------- the openai client


def saved_app(saved: dict[str, Any]) -> Starlette:
    """Serves `saved` for every POST /v1/responses, streamed with `events_for`."""

    async def create(request: Request) -> Response:
        body = await request.json()
        if body.get("stream"):
            frames = stream_out.events_for(saved)

            async def gen() -> Any:
                for f in frames:
                    yield f

            return StreamingResponse(gen(), media_type="text/event-stream")
        return JSONResponse(saved)

    return Starlette(routes=[Route("/v1/responses", create, methods=["POST"])])


@pytest.mark.slow
@pytest.mark.http
@pytest.mark.parametrize("name", SAVED)
def test_the_openai_client_reads_events_for_as_the_saved_response(name: str) -> None:
    saved = SAVED[name]
    with running(saved_app(saved)) as url, openai.OpenAI(base_url=url, api_key="x") as client:
        plain = client.responses.create(model=MODEL, input="q")
        events = list(client.responses.create(model=MODEL, input="q", stream=True))
        with client.responses.stream(model=MODEL, input="q", tools=[CALCULATOR]) as stream:
            deltas: dict[str, Any] = {e.type: e for e in stream}
            final = stream.get_final_response()
    assert plain.model_dump(exclude_unset=True) == saved
    assert events[-1].type == "response.completed"
    assert events[-1].response.model_dump(exclude_unset=True) == saved
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.id == saved["id"] and final.usage is not None
    assert final.usage.model_dump(exclude_unset=True) == saved["usage"]
    assert [o.type for o in final.output] == [o["type"] for o in saved["output"]]
    assert final.output_text == "".join(
        p["text"] for o in saved["output"] if o["type"] == "message" for p in o["content"])
    got: Any
    for got, want in zip(final.output, saved["output"], strict=True):
        if want["type"] == "function_call":
            assert (got.name, got.call_id, got.arguments) == (
                want["name"], want["call_id"], want["arguments"])
            assert deltas["response.function_call_arguments.delta"].snapshot == want["arguments"]
        elif want["type"] == "reasoning":
            assert got.content is not None
            assert [c.text for c in got.content] == [c["text"] for c in want["content"]]
        else:
            assert deltas["response.output_text.delta"].snapshot == want["content"][0]["text"]


# --------------------------------------------------------------------------- the key

USER = "What is 2 + 2?"


def key(**request: Any) -> bytes:
    request.setdefault("input", USER)
    return keys.key_of(keyed_input(request))


BASE = key()


@pytest.mark.parametrize("request_", [
    {"input": [{"role": "user", "content": USER}]},
    {"input": [{"type": "message", "role": "user", "content": USER}]},
    {"input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": USER}]}]},
    {"input": [{"role": "user", "content": [{"type": "input_text", "text": USER}],
                "id": None}]},
    {"tools": [], "tool_choice": "required", "parallel_tool_calls": False},
    {"text": {"format": {"type": "text"}}, "reasoning": {"effort": None}},
    {"text": {"format": {"type": "text"}, "verbosity": None}, "truncation": "disabled"},
    {"model": "other", "temperature": 0.7, "max_output_tokens": 5, "top_p": 0.9,
     "stream": True, "stream_options": {"include_obfuscation": False}, "store": False,
     "metadata": {"run": "1"}, "user": "u", "safety_identifier": "s",
     "prompt_cache_key": "k", "service_tier": "flex", "background": False,
     "include": ["reasoning.encrypted_content"], "top_logprobs": 2, "instructions": None},
])
def test_same_prompt_same_key(request_: dict[str, Any]) -> None:
    assert key(**request_) == BASE


@pytest.mark.parametrize("request_", [
    {"input": USER + " "},
    {"input": [{"role": "system", "content": USER}]},
    {"input": [{"role": "developer", "content": USER}]},
    {"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is 2"},
                                            {"type": "input_text", "text": " + 2?"}]}]},
    {"instructions": "Be brief."},
    {"tools": [CALCULATOR]},
    {"text": {"format": {"type": "json_object"}}},
    {"text": {"verbosity": "low"}},
    {"reasoning": {"effort": "high"}},
    {"truncation": "auto"},
    {"prompt": {"id": "pmpt_1"}},
    {"conversation": "conv_1"},
])
def test_what_the_model_sees_changes_the_key(request_: dict[str, Any]) -> None:
    assert key(**request_) != BASE


def test_instructions_are_not_a_system_message() -> None:
    assert key(instructions="Be brief.") != key(
        input=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": USER}])


def test_tool_fields_count_only_with_tools_and_schemas_stay_verbatim() -> None:
    with_tools = key(tools=[CALCULATOR])
    assert key(tools=[CALCULATOR], tool_choice="required") != with_tools
    assert key(tools=[CALCULATOR], parallel_tool_calls=True) == with_tools
    assert key(tools=[CALCULATOR], parallel_tool_calls=False) != with_tools
    assert key(tools=[{**CALCULATOR, "strict": None}]) == with_tools
    reordered = {**CALCULATOR, "parameters": {"required": ["expression"], "type": "object",
                                              "properties": CALCULATOR["parameters"]["properties"]}}
    assert key(tools=[reordered]) != with_tools
    schema = {"type": "json_schema", "name": "a", "schema": {"b": 1, "a": None}}
    assert key(text={"format": schema}) != key(
        text={"format": {**schema, "schema": {"a": None, "b": 1}}})


def test_tool_fields_count_with_a_stored_prompt_which_may_hold_tools() -> None:
    """A stored prompt template (`prompt`) can give the model tools the request does not
    list: forcing a call (or parallel calls) then changes the answer."""
    stored = key(prompt={"id": "pmpt_1"})
    assert key(prompt={"id": "pmpt_1"}, tool_choice="required") != stored
    assert key(prompt={"id": "pmpt_1"}, parallel_tool_calls=False) != stored
    assert key(prompt={"id": "pmpt_1"}, parallel_tool_calls=True) == stored


def test_echoed_output_items_match_with_or_without_their_empty_lists_and_nulls() -> None:
    turn: list[dict[str, Any]] = [{"role": "user", "content": USER},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "4", "annotations": [],
                          "logprobs": None}]},
            {"role": "user", "content": "And 3 + 3?"}]
    echoed = copy.deepcopy(turn)
    echoed[1]["content"][0] = {"type": "output_text", "text": "4", "annotations": [],
                               "logprobs": []}
    assert key(input=turn) == key(input=echoed)
    stripped = copy.deepcopy(turn)
    stripped[1] = {"id": "msg_1", "type": "message", "role": "assistant",
                   "status": "completed", "content": "4"}
    assert key(input=turn) == key(input=stripped)
    for field, value in (("id", "msg_2"), ("status", "in_progress")):
        changed = copy.deepcopy(turn)
        changed[1][field] = value
        assert key(input=changed) != key(input=turn), field


def test_previous_response_id_is_keyed_by_the_conversation_it_names() -> None:
    first = {"input": USER, "tools": [CALCULATOR]}
    answer_a = response(call('{"expression": "2 + 2"}', "fc_a"), rid="resp_a")
    answer_b = response(call('{"expression": "2 + 2"}', "fc_b"), rid="resp_b")
    follow = {"input": [{"type": "function_call_output", "call_id": "call_1", "output": "4"}],
              "tools": [CALCULATOR]}
    with pytest.raises(responses.NeedsPrevious):
        keyed_input({**follow, "previous_response_id": "resp_a"})
    prev_a = responses.previous_of(keyed_input(first), answer_a)
    prev_b = responses.previous_of(keyed_input(first), answer_b)
    key_a = keys.key_of(keyed_input({**follow, "previous_response_id": "resp_a"}, prev_a))
    key_b = keys.key_of(keyed_input({**follow, "previous_response_id": "resp_b"}, prev_b))
    assert key_a == key_b, "the same conversation, whatever the ids"
    other = responses.previous_of(keyed_input({**first, "instructions": "Be brief."}), answer_a)
    assert keys.key_of(keyed_input({**follow, "previous_response_id": "x"}, other)) != key_a
    assert keys.key_of(keyed_input(follow)) != key_a


def test_every_request_field_of_the_openai_client_is_classified() -> None:
    known = set(fields.TABLE.by_name)
    assert set(ResponseCreateParamsBase.__annotations__) | {"stream"} <= known
    assert {f.role for f in fields.FIELDS} == {keys.KEY, keys.STRICT, keys.IGNORED}
    assert all(f.reason for f in fields.FIELDS)


def test_sampling_params_are_what_strict_mode_compares() -> None:
    request = {"input": USER, "temperature": 1.0, "max_output_tokens": 5, "store": True,
               "tools": [], "top_p": None, "include": ["message.output_text.logprobs"],
               "frobnicate": 3}
    assert fields.TABLE.sampling_params({"input": USER, "include": []}) == {}
    assert fields.TABLE.sampling_params(request) == {"temperature": 1, "max_output_tokens": 5,
                                          "include": ["message.output_text.logprobs"],
                                          "frobnicate": 3}
