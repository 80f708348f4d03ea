"""The streams made from saved answers are, byte for byte, those the stream makers made
before they were made faster (tests/reference_streams.py, a copy of them): for answers of
every shape hypothesis draws and for the bench's answers."""

from __future__ import annotations

import random
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import gen_run
from replay_server.index.index import Bodies, Exchange, Selection
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH
from replay_server.wire import streams
from replay_server.wire.responses import events_for, first_piece, joined_deltas, split_deltas
from tests.wire import reference_streams as old
from tests.wire.stream_cases import ATOMS, TEXTS, chat_bodies, completion_bodies, responses_bodies


def answered_by(body: dict[str, Any]) -> list[Selection]:
    """The selections of a request that one saved exchange, not a recorded stream, answers."""
    bodies = Bodies()
    start, size = bodies.add(orjson.dumps(body))
    return [[(Exchange(bodies, start, size, 1, "f", 1, None, b"{}"), None)]]


OLD_PIECE = re.compile(r"\s*(?:\w{1,16}|[^\w\s])")  # the rule as it was, unicode \s and \w


@settings(max_examples=1500, deadline=None)
@given(text=st.one_of(TEXTS, st.lists(ATOMS, max_size=60).map("".join),
                      st.text(st.characters(max_codepoint=0x7f), max_size=60),
                      st.text(st.sampled_from(" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0.,_aZ9"),
                              max_size=60)))
def test_pieces_are_those_of_the_regex(text: str) -> None:
    found = OLD_PIECE.findall(text)
    used = sum(map(len, found))
    expected = found[:-1] + [found[-1] + text[used:]] if found else ([text] if text else [])
    assert split_deltas(text) == expected
    assert first_piece(text) == (expected[0] if expected else "")


@settings(max_examples=300, deadline=None)
@given(body=chat_bodies(), include_usage=st.booleans())
def test_chat_streams_are_the_bytes_they_were(body: dict[str, Any], include_usage: bool
                                              ) -> None:
    assert b"".join(streams.chunks(CHAT_PATH, body, include_usage)) == b"".join(
        old.chunks(CHAT_PATH, body, include_usage))
    selections = answered_by(body)
    assert streams.stream(CHAT_PATH, selections, include_usage) == old.stream(
        CHAT_PATH, selections, include_usage)


@settings(max_examples=200, deadline=None)
@given(body=completion_bodies(), include_usage=st.booleans())
def test_completion_streams_are_the_bytes_they_were(body: dict[str, Any], include_usage: bool
                                                    ) -> None:
    assert b"".join(streams.chunks(COMPLETION_PATH, body, include_usage)) == b"".join(
        old.chunks(COMPLETION_PATH, body, include_usage))


@settings(max_examples=300, deadline=None)
@given(body=responses_bodies(), terminal_by_status=st.booleans())
def test_responses_streams_are_the_bytes_they_were(body: dict[str, Any],
                                                   terminal_by_status: bool) -> None:
    assert events_for(body, terminal_by_status=terminal_by_status) == old.events_for(
        body, terminal_by_status=terminal_by_status)
    selections = answered_by(body)
    assert streams.stream(RESPONSES_PATH, selections, False) == old.stream(
        RESPONSES_PATH, selections, False)


def test_the_bench_streams_are_the_bytes_they_were() -> None:
    rng = random.Random(15)
    for i in range(60):
        chat = gen_run.chat_record(i, rng)["response"]
        completion = gen_run.completion_record(i, rng)["response"]
        responses = gen_run.responses_record(i, rng)["response"]
        assert isinstance(chat, dict) and isinstance(completion, dict)
        assert isinstance(responses, dict)
        for usage in (False, True):
            assert b"".join(streams.chunks(CHAT_PATH, chat, usage)) == b"".join(
                old.chunks(CHAT_PATH, chat, usage))
            assert b"".join(streams.chunks(COMPLETION_PATH, completion, usage)) == b"".join(
                old.chunks(COMPLETION_PATH, completion, usage))
        assert events_for(responses) == old.events_for(responses)


@settings(max_examples=1500, deadline=None)
@given(text=st.one_of(TEXTS, st.lists(ATOMS, max_size=60).map("".join),
                      st.text(st.characters(max_codepoint=0x7f), max_size=60),
                      st.text(st.sampled_from(" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0.,_aZ9"),
                              max_size=60),
                      st.lists(st.sampled_from(["a" * 15, "b" * 16, "c" * 17, " ", ".", "\n"]),
                               max_size=8).map("".join)))
def test_pieces_joined_are_those_of_the_regex(text: str) -> None:
    joined = joined_deltas(text)
    if "\x00" in text or "\\u0000" in text:
        assert joined is None
    else:
        assert joined == "\x00".join(split_deltas(text))


def recorded_answer(body: dict[str, Any], frames: bytes, carries_usage: bool
                    ) -> list[Selection]:
    """The selections of a request that a recorded stream answers."""
    bodies = Bodies()
    start, size = bodies.add(orjson.dumps(body))
    stream = (*bodies.add(frames), carries_usage)
    return [[(Exchange(bodies, start, size, len(body["choices"]), "f", 1, None, b"{}",
                       stream=stream), None)]]


RECORDED = st.one_of(chat_bodies().map(lambda b: (CHAT_PATH, b)),
                     completion_bodies().map(lambda b: (COMPLETION_PATH, b)))
# what a recording may hold besides the usual: other line ends, blank lines, other fields,
# `"usage"` and `[DONE]` in a text, a usage chunk first or last (a few of these at once)
USAGE_FRAME = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":1}}\n\n'
RESHAPES = st.lists(st.sampled_from([
    lambda f: f.replace(b"\n", b"\r\n"), lambda f: f.replace(b"\n", b"\r"),
    lambda f: b"\n" + f, lambda f: f + b"\n", lambda f: f + b"\n\n",
    lambda f: f.replace(b"\n\ndata: ", b"\n\n\ndata: "),
    lambda f: f.replace(b"data: ", b"event: x\ndata: "),
    lambda f: f.replace(b"data: [DONE]\n\n", b""), lambda f: f[:-1],
    lambda f: f.replace(b'"content":"', b'"content":"[DONE] \\"usage\\": ', 1),
    lambda f: f.replace(b'"choices":[]', b'"choices": []'),
    lambda f: USAGE_FRAME + f, lambda f: f + USAGE_FRAME]), max_size=3)


@settings(max_examples=1000, deadline=None)
@given(case=RECORDED, recorded_usage=st.booleans(), include_usage=st.booleans(),
       reshapes=RESHAPES)
def test_recorded_streams_with_usage_added_or_dropped_are_the_bytes_they_were(
        case: tuple[str, dict[str, Any]], recorded_usage: bool, include_usage: bool,
        reshapes: list[Any]) -> None:
    endpoint, body = case
    frames = b"".join(old.chunks(endpoint, body, recorded_usage))
    for reshape in reshapes:
        frames = reshape(frames)
    selections = recorded_answer(body, frames, recorded_usage)
    assert streams.stream(endpoint, selections, include_usage) == old.stream(
        endpoint, selections, include_usage)


@pytest.mark.parametrize("reshape", [
    lambda f: b"\n" + USAGE_FRAME + f,  # a blank line first: a frame by itself
    lambda f: f.replace(b"data: [DONE]\n\n", b"") + USAGE_FRAME[:-1],  # the last unended
    lambda f: (f + USAGE_FRAME).replace(b"\n", b"\r") + b"\n\n",  # CRs, an LF at the end
    lambda f: f.replace(b"\n\ndata: ", b"\n\n\ndata: ") + USAGE_FRAME,
])
@pytest.mark.parametrize("include_usage", [False, True])
def test_recorded_frames_of_another_shape_are_cut_as_the_sse_rules_say(
        reshape: Any, include_usage: bool) -> None:
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "a b"},
                         "logprobs": None, "finish_reason": "stop"}], "usage": None}
    frames = reshape(b"".join(old.chunks(CHAT_PATH, body, False)))
    selections = recorded_answer(body, frames, True)
    assert streams.stream(CHAT_PATH, selections, include_usage) == old.stream(
        CHAT_PATH, selections, include_usage)
