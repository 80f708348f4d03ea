"""Response bodies and SSE framing, built from saved exchanges (pure functions)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.index.index import Bodies, Exchange
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.wire.chat.stream_out import STREAM as CHAT_STREAM
from replay_server.wire.choices import reply as replies
from replay_server.wire.completions.stream_out import STREAM as COMPLETION_STREAM
from replay_server.wire.families import family_of
from replay_server.wire.pieces import first_piece, joined_deltas, split_deltas
from replay_server.wire.responses.stream_in import aggregate
from replay_server.wire.responses.stream_out import event_payloads, events_for, frame
from replay_server.wire.sse import fill
from tests.support import chat_response, completion_response

STREAMS = {CHAT_PATH: CHAT_STREAM, COMPLETION_PATH: COMPLETION_STREAM}


def exchange(body: dict[str, Any], sample_usage: Any = None) -> Exchange:
    bodies = Bodies()
    start, size = bodies.add(orjson.dumps(body))
    return Exchange(bodies, start, size, len(body["choices"]), "f", 1, None, b"{}",
                    sample_usage)


def frames(endpoint: str, body: dict[str, Any], include_usage: bool) -> list[Any]:
    raw = b"".join(STREAMS[endpoint].chunks(body, include_usage))
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    assert all(e.startswith(b"data: ") for e in events[:-1])
    return [e[6:] if e == b"data: [DONE]" else orjson.loads(e[6:]) for e in events[:-1]]


def test_one_whole_exchange_is_served_as_its_saved_bytes() -> None:
    body = chat_response("a")
    assert replies.encode([[(exchange(body), None)]]) == orjson.dumps(body)


def test_one_sample_of_several_gets_its_own_usage_or_null() -> None:
    body = chat_response("a", "b")
    own = [{"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}, None]
    with_usage = replies.body([[(exchange(body, own), 0)]])
    assert with_usage["usage"] == own[0]
    assert with_usage["choices"] == [{**body["choices"][0], "index": 0}]
    assert replies.body([[(exchange(body), 1)]])["usage"] is None
    assert replies.body([[(exchange(body), 1)]])["choices"][0]["message"]["content"] == "b"


def test_samples_from_several_exchanges_count_the_prompt_once() -> None:
    parts: list[tuple[Exchange, int | None]] = [(exchange(chat_response(t)), None)
                                                for t in "xyz"]
    body = replies.body([parts])
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}


def test_a_missing_count_is_never_invented() -> None:
    parts: list[tuple[Exchange, int | None]] = [
        (exchange(chat_response("x")), None), (exchange(chat_response("y", usage=None)), None)]
    assert replies.body([parts])["usage"] is None


def test_a_batch_sums_the_counts_of_its_prompts() -> None:
    a, b = exchange(completion_response("a")), exchange(completion_response("b"))
    body = replies.body([[(a, None)], [(b, None)]])
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}
    assert body["id"] == "cmpl-1"


def test_chat_stream_framing() -> None:
    body = chat_response("4", reasoning="2+2=4")
    got = frames(CHAT_PATH, body, include_usage=True)
    assert got[-1] == b"[DONE]"
    chunks = got[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {body["id"]}
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas == [{"role": "assistant", "content": ""}, {"reasoning": "2"},
                      {"reasoning": "+"}, {"reasoning": "2"}, {"reasoning": "="},
                      {"reasoning": "4"}, {"content": "4"}, {}]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 7 + ["stop"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == body["usage"]


def test_no_usage_chunk_unless_asked() -> None:
    got = frames(CHAT_PATH, chat_response("4"), include_usage=False)
    assert all(c == b"[DONE]" or "usage" not in c for c in got)


def test_each_choice_is_streamed_under_its_index() -> None:
    got = frames(CHAT_PATH, chat_response("a", "b"), include_usage=False)[:-1]
    by_index: dict[int, list[Any]] = {}
    for c in got:
        by_index.setdefault(c["choices"][0]["index"], []).append(c["choices"][0])
    assert by_index[0][0]["delta"]["role"] == "assistant"
    assert by_index[1][0]["delta"]["role"] == "assistant"
    assert by_index[1][1]["delta"] == {"content": "b"}


def test_tool_calls_stream_as_indexed_deltas() -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": "{\"a\": 1}"}}
    body = chat_response(None, tool_calls=[call], finish="tool_calls")
    got = frames(CHAT_PATH, body, include_usage=False)[:-1]
    deltas = [c["choices"][0]["delta"] for c in got]
    first = {**call, "index": 0, "function": {"name": "add", "arguments": "{"}}
    assert {"tool_calls": [first]} in deltas
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]
    assert pieces == ["{", '"', "a", '"', ":", " 1", "}"]
    assert got[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_completion_stream_framing_keeps_logprobs() -> None:
    body = completion_response(" Paris")
    body["choices"][0]["logprobs"] = {"tokens": [" Paris"], "token_logprobs": [-0.1],
                                      "top_logprobs": None, "text_offset": [0]}
    got = frames(COMPLETION_PATH, body, include_usage=True)
    assert got[0]["object"] == "text_completion"
    assert got[0]["choices"][0]["text"] == " Paris"
    assert got[0]["choices"][0]["logprobs"] == body["choices"][0]["logprobs"]
    assert got[1]["choices"][0]["finish_reason"] == "stop"
    assert got[2]["usage"] == body["usage"]
    assert got[3] == b"[DONE]"


TEXTS = st.text(st.characters(codec="utf-8"), max_size=80)


@settings(max_examples=60, deadline=None)
@given(content=TEXTS, reasoning=TEXTS, arguments=TEXTS, text=TEXTS)
def test_small_delta_frames_are_what_encoding_each_chunk_whole_gives(
        content: str, reasoning: str, arguments: str, text: str) -> None:
    """The frames made from templates are byte for byte those of encoding each chunk, and
    join back to the saved answer."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    chat = chat_response(content, reasoning=reasoning or None, tool_calls=[call])
    for endpoint, body in ((CHAT_PATH, chat), (COMPLETION_PATH, completion_response(text))):
        raw = b"".join(STREAMS[endpoint].chunks(body, include_usage=True))
        frames = raw.split(b"\n\n")[:-1]
        for one in frames[:-1]:
            assert one == b"data: " + orjson.dumps(orjson.loads(one[6:]))
        aggregator = family_of(endpoint).aggregator()
        aggregator.feed(raw)
        got = aggregator.result()["choices"][0]
        if endpoint == CHAT_PATH:
            assert got["message"]["content"] == content
            assert got["message"].get("reasoning") == (reasoning or None)
            assert got["message"]["tool_calls"][0]["function"]["arguments"] == arguments
        else:
            assert got["text"] == text


@given(content=TEXTS, cuts=st.lists(st.integers(min_value=0), max_size=12),
       ends=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_a_stream_fed_in_any_pieces_aggregates_as_fed_whole(
        content: str, cuts: list[int], ends: bytes) -> None:
    """The aggregator takes every whole event of what it was fed at once: a stream cut
    anywhere (a CRLF split in two included) gives the answer it gives fed whole."""
    raw = b"".join(CHAT_STREAM.chunks(chat_response(content), include_usage=True))
    raw = raw.replace(b"\n", ends)
    whole = family_of(CHAT_PATH).aggregator()
    assert whole.feed(raw)
    pieces = family_of(CHAT_PATH).aggregator()
    points = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    done = [pieces.feed(raw[a:b]) for a, b in zip(points, points[1:], strict=False)]
    assert done[-1] and pieces.result() == whole.result()
    assert whole.result()["choices"][0]["message"]["content"] == content


@settings(max_examples=60, deadline=None)
@given(text=TEXTS, summary=TEXTS, arguments=TEXTS)
def test_responses_event_frames_are_their_payloads_encoded(text: str, summary: str,
                                                          arguments: str) -> None:
    body = {"id": "resp_1", "object": "response", "status": "completed", "output": [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
         "content": [{"type": "reasoning_text", "text": text}]},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": []}]},
        {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f",
         "arguments": arguments, "status": "completed"}], "usage": None}
    frames = events_for(body)
    assert frames == [frame(e) for e in event_payloads(body)]
    assert aggregate(b"".join(frames)).response == body


ATOMS = st.sampled_from(list("ab é漢\n\t\"\\ \x00.,!x1\x1f") + ["\\u0000", "  ", "a" * 21])


@settings(max_examples=500)
@given(st.lists(ATOMS, max_size=30).map("".join))
def test_frames_made_in_one_pass_are_the_frames_encoded_one_by_one(text: str) -> None:
    """sse.fill (one escape of the whole text) equals encoding each piece's frame."""
    pieces = split_deltas(text)
    assert first_piece(text) == (pieces[0] if pieces else "")
    head, tail = b'data: {"x":', b'}\n\n'
    joined = joined_deltas(text)
    assert (joined is None) == ("\x00" in text or "\\u0000" in text)
    if joined is not None:
        assert b"".join(fill(head, tail, joined)) == b"".join(
            head + orjson.dumps(p) + tail for p in pieces)
