"""`aggregate.whole` (a recorded stream checked before it is served) says what the full
aggregator fed the stream says: the same body, the same refusal, for usual streams and
for streams changed in every way a hand or a bug could change them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.wire import aggregate, streams
from replay_server.wire.aggregate import StreamAggregator, StreamError
from tests.wire.stream_cases import chat_bodies, completion_bodies


def fed(stream: bytes, chat: bool) -> Any:
    """What the full aggregator fed all of `stream` gives (it has ended): the body, or the
    error's words."""
    aggregator = StreamAggregator(chat)
    try:
        aggregator.feed(stream)
        return aggregator.result(ended=True)
    except StreamError as e:
        return ("refused", str(e))


def whole(stream: bytes, chat: bool) -> Any:
    try:
        return aggregate.whole(stream, chat)
    except StreamError as e:
        return ("refused", str(e))


def taken_at_once(stream: bytes, chat: bool) -> bool:
    """Whether `whole` took the stream without feeding it (the fast path)."""
    payloads = aggregate._payloads(stream)
    return payloads is not None and StreamAggregator(chat)._take(payloads)


def recorded(endpoint: str, body: dict[str, Any], include_usage: bool) -> bytes:
    return b"".join(streams.chunks(endpoint, body, include_usage))


BODIES = st.one_of(chat_bodies().map(lambda b: (CHAT_PATH, b)),
                   completion_bodies().map(lambda b: (COMPLETION_PATH, b)))


@settings(max_examples=300, deadline=None)
@given(case=BODIES, include_usage=st.booleans())
def test_a_usual_stream_is_taken_at_once_and_aggregates_as_fed(
        case: tuple[str, dict[str, Any]], include_usage: bool) -> None:
    endpoint, body = case
    stream = recorded(endpoint, body, include_usage)
    chat = endpoint == CHAT_PATH
    assert whole(stream, chat) == fed(stream, chat)
    assert taken_at_once(stream, chat)


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


@settings(max_examples=600, deadline=None)
@given(data=st.data(), case=BODIES, include_usage=st.booleans())
def test_a_changed_stream_is_refused_or_taken_exactly_as_fed(
        data: st.DataObject, case: tuple[str, dict[str, Any]], include_usage: bool) -> None:
    """The fast path never takes what the full aggregator refuses, nor reads another body."""
    endpoint, body = case
    stream = data.draw(changed(recorded(endpoint, body, include_usage)))
    chat = endpoint == CHAT_PATH
    assert whole(stream, chat) == fed(stream, chat)


def content_frame(text: bytes) -> bytes:
    """A content delta whose JSON string is `text` (bytes put as they are)."""
    return (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
            b'"choices":[{"index":0,"logprobs":null,"delta":{"content":' + text +
            b'},"finish_reason":null}]}\n\n')


ROLE = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices"'
        b':[{"index":0,"logprobs":null,"delta":{"role":"assistant","content":""},'
        b'"finish_reason":null}]}\n\n')
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize("texts", [
    [b'"a', b'b"', b'"c","d"'],  # joined they would be three strings: each is not one
    [b'"a"', b'"b\\"'],  # an escaped closing quote
    [b'"a"', b'"\\u12"'],  # a bad escape
    [b'"a"', b"1"], [b'"a"', b"null"], [b'"a"', b'["b"]'], [b'"a"', b""],
    [b'"a"', b'"b" "c"'],
])
def test_a_delta_that_is_not_one_json_string_is_left_to_the_full_aggregator(
        texts: list[bytes]) -> None:
    """Refused (or, `null`, skipped) as feeding it says; never read as texts joined."""
    stream = ROLE + b"".join(content_frame(t) for t in texts) + DONE
    assert not taken_at_once(stream, True)
    assert whole(stream, True) == fed(stream, True)
    assert isinstance(fed(stream, True), tuple) == (texts[-1] != b"null")


def test_deltas_the_template_does_not_cover_are_taken_in_full() -> None:
    """What a repeat of the template would change besides its text: the envelope changed
    back and forth, usage, logprobs joined, a second field in the delta; each goes through
    the full aggregator, and the answer is the one feeding gives."""
    def chunk(**changes: Any) -> bytes:
        base: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                                "model": "m", "choices": [{"index": 0, "logprobs": None,
                                                           "delta": {"content": "x"},
                                                           "finish_reason": None}]}
        part = base["choices"][0]
        for key, value in changes.items():
            if key in ("logprobs", "delta", "finish_reason", "index"):
                part[key] = value
            else:
                base[key] = value
        return b"data: " + orjson.dumps(base) + b"\n\n"

    lp = {"content": [{"token": "x", "logprob": -1.0}]}
    streams_ = [
        [chunk(), chunk(id="d"), chunk(), chunk()],
        [chunk(usage={"prompt_tokens": 1}), chunk(usage={"prompt_tokens": 1}),
         chunk(usage={"prompt_tokens": 2}), chunk(usage={"prompt_tokens": 1})],
        [chunk(logprobs=lp), chunk(logprobs=lp), chunk(logprobs=lp)],
        [chunk(delta={"content": "x", "role": "tool"}), chunk(delta={"role": "user"}),
         chunk(delta={"content": "x", "role": "tool"})],
        [chunk(finish_reason="stop"), chunk(finish_reason="length"),
         chunk(finish_reason="stop")],
        [chunk(delta={"refusal": "no"}), chunk(delta={"content": "y"}),
         chunk(delta={"refusal": "no"})],
        [chunk(index=1), chunk(index=0), chunk(index=1), chunk(index=1)],
        [chunk(delta={"content": "x"}), chunk(delta={"content": 1})],
        [chunk(delta={"content": "x", "reasoning": "r"})] * 3,
        [chunk(delta={"role": "assistant"})] * 3, [chunk(delta={"name": "x"})] * 3,
        [chunk(), chunk(), chunk(error={"message": "overloaded"})],
    ]
    for frames in streams_:
        stream = ROLE + b"".join(frames) + DONE
        assert whole(stream, True) == fed(stream, True)


def test_what_is_not_the_usual_shape_is_fed() -> None:
    """CRLF, comments, other fields, data on two lines, no `[DONE]` at the end: the
    full aggregator reads these as the SSE rules say."""
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "a b c"},
                         "logprobs": None, "finish_reason": "stop"}], "usage": None}
    stream = recorded(CHAT_PATH, body, False)
    for other in (stream.replace(b"\n", b"\r\n"), b": hi\n\n" + stream,
                  stream.replace(b"data: {", b"event: x\ndata: {", 1),
                  stream.replace(b',"model"', b'\ndata: ,"model"', 1), stream[:-2],
                  stream + DONE, stream.replace(b"data: {", b"data:{"),
                  stream.replace(b'{"id"', b'{\n"id"')):  # a line that is not data
        assert not taken_at_once(other, True)
        assert whole(other, True) == fed(other, True)
