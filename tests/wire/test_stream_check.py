"""A chat or completions stream in: what the one aggregator reads from a stream (a
recorded one, checked before it is served, or one arriving at the recorder), as the SSE
rules say, and what it refuses."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.index.index import Bodies, Exchange
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.wire import sse
from replay_server.wire.families import family_of
from replay_server.wire.sse import StreamError
from tests.wire.stream_cases import chat_bodies, completion_bodies


def aggregated(endpoint: str, stream: bytes) -> Any:
    """The body a whole stream aggregates to, or the refusal's words."""
    try:
        return family_of(endpoint).aggregate(stream)
    except StreamError as e:
        return ("refused", str(e))


def streamed(endpoint: str, body: dict[str, Any], include_usage: bool) -> bytes:
    """The stream a reply made from a saved (not streamed) body sends."""
    bodies = Bodies()
    start, size = bodies.add(orjson.dumps(body))
    exchange = Exchange(bodies, start, size, len(body["choices"]), "f", 1, None, b"{}")
    return family_of(endpoint).stream([[(exchange, None)]], include_usage)


BODIES = st.one_of(chat_bodies().map(lambda b: (CHAT_PATH, b)),
                   completion_bodies().map(lambda b: (COMPLETION_PATH, b)))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(case=BODIES, include_usage=st.booleans())
def test_a_stream_made_from_a_saved_answer_aggregates_to_its_texts(
        case: tuple[str, dict[str, Any]], include_usage: bool) -> None:
    endpoint, body = case
    got = aggregated(endpoint, streamed(endpoint, body, include_usage))
    assert not isinstance(got, tuple), got
    assert got["usage"] == (body["usage"] if include_usage else None)
    for saved, back in zip(body["choices"], got["choices"], strict=True):
        if endpoint == COMPLETION_PATH:
            assert back["text"] == saved["text"]
            continue
        for name in ("content", "reasoning", "reasoning_content", "refusal"):
            if saved["message"].get(name):
                assert back["message"][name] == saved["message"][name]
        assert back["finish_reason"] == saved["finish_reason"]


BODY: dict[str, Any] = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                        "choices": [{"index": 0, "message": {"role": "assistant",
                                                             "content": "a b c"},
                                     "logprobs": None, "finish_reason": "stop"}],
                        "usage": None}
STREAM = streamed(CHAT_PATH, BODY, False)


@pytest.mark.parametrize("other", [
    STREAM.replace(b"\n", b"\r\n"), STREAM.replace(b"\n", b"\r"), b": hi\n\n" + STREAM,
    STREAM.replace(b"data: {", b"event: x\ndata: {", 1),
    STREAM.replace(b',"model"', b'\ndata: ,"model"', 1),  # data on two lines
    STREAM.replace(b"data: {", b"data:{"), STREAM.replace(b"\n\ndata: ", b"\n\n\ndata: "),
    STREAM + b"data: [DONE]\n\n", STREAM + b": a comment after the end\n\n",
    STREAM[:-2], STREAM.replace(b"data: [DONE]\n\n", b""),  # every choice finished, no [DONE]
], ids=["crlf", "cr", "comment", "event-field", "two-data-lines", "no-space",
        "blank-lines", "done-twice", "comment-after", "done-unended", "no-done"])
def test_what_the_sse_rules_allow_aggregates_alike(other: bytes) -> None:
    assert aggregated(CHAT_PATH, other) == aggregated(CHAT_PATH, STREAM)


@pytest.mark.parametrize("other, reason", [
    (STREAM[:STREAM.rindex(b"data: {")], "with a choice that has no finish_reason"),
    (STREAM.replace(b'{"id"', b'{\n"id"', 1), "not JSON"),  # a line that is not data
    (STREAM.replace(b'"content":"a"', b'"content":1', 1), "not a string"),
    (STREAM.replace(b'"content":" b"', b'"content":" b","refusal":2', 1), "not a string"),
    (b'data: {"error":{"message":"overloaded"}}\n\n' + STREAM, "carried an error"),
    (b"data: [1]\n\n" + STREAM, "carried an error"),
    (STREAM.replace(b'"index":0', b'"index":"0"', 1), "integer index"),
    (STREAM.replace(b'"delta":{', b'"delta":[{', 1).replace(b'"},"finish', b'"}],"finish', 1),
     "unexpected shape"),
])
def test_what_is_no_answer_is_refused(other: bytes, reason: str) -> None:
    got = aggregated(CHAT_PATH, other)
    assert isinstance(got, tuple) and reason in got[1], got


@settings(max_examples=200, deadline=None)
@given(case=BODIES, include_usage=st.booleans(), cuts=st.lists(st.integers(0), max_size=8),
       ends=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_a_stream_fed_in_any_pieces_aggregates_as_fed_whole(
        case: tuple[str, dict[str, Any]], include_usage: bool, cuts: list[int],
        ends: bytes) -> None:
    """A stream cut anywhere (a CRLF split in two included) gives what it gives whole."""
    endpoint, body = case
    raw = streamed(endpoint, body, include_usage).replace(b"\n", ends)
    whole = family_of(endpoint).aggregator()
    assert whole.feed(raw)
    pieces = family_of(endpoint).aggregator()
    points = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    done = [pieces.feed(raw[a:b]) for a, b in zip(points, points[1:], strict=False)]
    assert done[-1] and pieces.result() == whole.result()


def test_a_long_text_in_many_deltas_is_joined_once() -> None:
    """Ten thousand deltas (a long reasoning trace) aggregate to their text."""
    text = "word " * 10_000
    body = {**BODY, "choices": [{**BODY["choices"][0], "message": {
        "role": "assistant", "content": "x", "reasoning": text}}]}
    got = aggregated(CHAT_PATH, streamed(CHAT_PATH, body, False))
    assert got["choices"][0]["message"]["reasoning"] == text


def test_logprob_lists_are_joined_in_order() -> None:
    entries: list[dict[str, Any]] = [
        {"token": t, "logprob": -1.0, "bytes": None, "top_logprobs": []}
        for t in ("a", " b", " c")]
    body = {**BODY, "choices": [{**BODY["choices"][0], "logprobs": {"content": entries}}]}
    got = aggregated(CHAT_PATH, streamed(CHAT_PATH, body, False))
    assert got["choices"][0]["logprobs"] == {"content": entries}
    assert orjson.dumps(got["choices"][0]) == orjson.dumps({
        "index": 0, "message": {"role": "assistant", "content": "a b c"},
        "finish_reason": "stop", "logprobs": {"content": entries}})


def respaced(stream: bytes) -> bytes:
    """The same events, each written as `json.dumps` writes it (spaces after its colons
    and commas): the aggregator reads them alike, and no template of orjson's bytes
    matches them, so every event is merged in full."""
    out = []
    whole = sse.spans(stream)
    rest = stream[whole[-1][1] if whole else 0:]  # a last frame left open stays open
    for a, b in whole:
        frame = stream[a:b]
        data = sse.data_of(frame)
        try:
            chunk = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            chunk = None
        out.append(frame if not isinstance(chunk, dict) else
                   b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")
    return b"".join(out) + rest


def verdict(endpoint: str, stream: bytes) -> Any:
    got = aggregated(endpoint, stream)
    return got[1].split(":")[0] if isinstance(got, tuple) else got


BYTES = st.sampled_from([b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"\n",
                         b"\r", b"x", b"0", b"null", b'"usage":{"a":1},', b'"error":1,',
                         b"data: ", b"\n\n", b'\\"', b'","', b"\\u0000"])


@st.composite
def changed(draw: st.DrawFn, stream: bytes) -> bytes:
    """`stream` changed a few times: bytes put in, cut out or replaced anywhere (mostly
    inside the texts of the usual deltas), whole events dropped, repeated or swapped."""
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["put", "cut", "replace", "text", "events"]))
        at = draw(st.integers(0, len(stream)))
        if how == "text":  # inside or at the edges of a delta's JSON string
            spots = [i for i in range(len(stream)) if stream.startswith(b'":"', i)]
            at = draw(st.sampled_from(spots)) + draw(st.integers(0, 6)) if spots else at
        if how in ("put", "text"):
            stream = stream[:at] + draw(BYTES) + stream[at:]
        elif how == "cut":
            stream = stream[:at] + stream[at + draw(st.integers(1, 4)):]
        elif how == "replace":
            stream = stream[:at] + draw(BYTES) + stream[at + 1:]
        else:
            events = stream.split(b"\n\n")
            i, j = draw(st.integers(0, len(events) - 1)), draw(st.integers(0, len(events) - 1))
            events[i], events[j] = events[j], events[i]
            if draw(st.booleans()):
                events.insert(i, events[j])
            else:
                del events[i]
            stream = b"\n\n".join(events)
    return stream


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(data=st.data(), case=BODIES, include_usage=st.booleans())
def test_a_stream_changed_anywhere_reads_as_its_events_say(
        data: st.DataObject, case: tuple[str, dict[str, Any]], include_usage: bool) -> None:
    """Deltas that repeat the one before them but for their text are added without being
    parsed in full (see ChoicesAggregator): the answer, or the refusal, is the one the
    same events give when every one of them is merged in full."""
    endpoint, body = case
    stream = data.draw(changed(streamed(endpoint, body, include_usage)))
    assert verdict(endpoint, stream) == verdict(endpoint, respaced(stream))


@pytest.mark.parametrize("texts", [
    [b'"a', b'b"', b'"c","d"'],  # joined they would be three strings: each is not one
    [b'"a"', b'"b\\"'],  # an escaped closing quote
    [b'"a"', b'"\\u12"'],  # a bad escape
    [b'"a"', b"1"], [b'"a"', b"null"], [b'"a"', b'["b"]'], [b'"a"', b""],
    [b'"a"', b'"b" "c"'],
])
def test_a_repeat_that_is_not_one_json_string_is_merged_in_full(texts: list[bytes]) -> None:
    """Refused (or, `null`, skipped), as its event says; never read as a text."""
    role = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
            b'"choices":[{"index":0,"logprobs":null,"delta":{"role":"assistant",'
            b'"content":""},"finish_reason":null}]}\n\n')
    stream = role + b"".join(
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"logprobs":null,"delta":{"content":' + text +
        b'},"finish_reason":null}]}\n\n' for text in texts) + b"data: [DONE]\n\n"
    got = aggregated(CHAT_PATH, stream)
    assert isinstance(got, tuple) == (texts[-1] != b"null")
    assert verdict(CHAT_PATH, stream) == verdict(CHAT_PATH, respaced(stream))


@pytest.mark.parametrize("brk", [b"\n", b"\r"])
def test_a_line_break_inside_a_repeated_delta_ends_its_data_line(brk: bytes) -> None:
    # (found by the test above) a repeat of the chunk before it, but for a line break
    # after its text: the data line ends there, so the event's data is not JSON, though
    # the bytes around the text still match the repeat's template
    body = {**BODY, "choices": [{**BODY["choices"][0], "message": {
        "role": "assistant", "content": "one two three four five six seven"}}]}
    stream = streamed(CHAT_PATH, body, False)
    frames = stream.split(b"\n\n")
    at = next(i for i in range(2, len(frames)) if b'"content":"' in frames[i]
              and b'"content":"' in frames[i - 1])
    text = frames[at].index(b'"content":"') + len(b'"content":"')
    end = frames[at].index(b'"', text) + 1  # (the texts here hold no quote to escape)
    frames[at] = frames[at][:end] + brk + frames[at][end:]
    broken = b"\n\n".join(frames)
    assert broken != stream
    assert verdict(CHAT_PATH, broken) == "a stream event is not JSON"
