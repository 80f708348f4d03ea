"""Saved answers -> SSE streams, for chat, completions and the Responses API. No HTTP.

- A recorded stream is sent again as the frames the upstream sent, byte for byte: the same
  deltas in the same order (for chat and completions, the usage chunk is dropped or added
  when the request's `stream_options.include_usage` differs from the recording's: the
  saved usage, which is null then).
- Any other answer (an import, a non-streamed recording, an answer assembled from several
  samples) is streamed in small deltas, never as one: `openai_responses.split_deltas`
  pieces (a word of up to 16 characters, or one other character, with the whitespace
  before it), or one delta per token where saved logprobs spell out the text. Chat and
  completions are framed like vLLM/OpenAI; the Responses API gets its typed events
  (`openai_responses.events_for`).

A stream of small deltas is hundreds of frames that differ only in their text: each kind
of frame is encoded once as a template (the JSON before and after the text), and a run of
deltas costs a few passes over its text (`openai_responses.joined_deltas` cuts it,
`sse.fill` escapes it once and puts the frames in), not one dictionary and one encoding
per chunk.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from itertools import chain
from typing import Any, NamedTuple

import orjson

from ..paths import CHAT_PATH, RESPONSES_PATH
from . import replies
from .replies import S, Saved, Selection
from .responses import first_piece, joined_deltas, split_deltas, stream_for
from .sse import Frames, fill

DONE = b"data: [DONE]\n\n"
_ENVELOPE = ("id", "created", "model", "system_fingerprint")
_REASONING = ("reasoning", "reasoning_content")
# Stands for the text of a delta in a template; no saved text holds it.
_MARK = "\x00\x01replay-delta\x01\x00"
_MARK_JSON = orjson.dumps(_MARK)


class Run(NamedTuple):
    """Deltas that differ only in their text, one per piece of `text` (`split_deltas`):
    `marked` is the delta with `_MARK` where the text goes (`shape` names the kind)."""

    shape: Hashable
    marked: dict[str, Any]
    text: str


Delta = dict[str, Any] | Run


def _frame(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def recorded(selections: Sequence[Selection[S]]) -> S | None:
    """The exchange whose recorded frames `stream` sends for these selections, if any."""
    whole = _whole(selections)
    return whole if whole is not None and whole.stream is not None else None


def _whole(selections: Sequence[Selection[S]]) -> S | None:
    """The one saved exchange that answers the request whole, if that is the case."""
    if len(selections) == 1 and len(selections[0]) == 1 and selections[0][0][1] is None:
        return selections[0][0][0]
    return None


def stream(endpoint: str, selections: Sequence[Selection[Saved]], include_usage: bool) -> bytes:
    """The whole SSE stream for a request: the recorded frames when one recorded stream
    answers it whole, else frames made from the body in small deltas."""
    whole = _whole(selections)
    if endpoint == RESPONSES_PATH:
        assert whole is not None  # one sample per request: always one whole exchange
        frames = whole.frames
        return frames if frames is not None else stream_for(orjson.loads(whole.body))
    if whole is not None and whole.stream is not None:
        frames = whole.frames
        assert frames is not None
        if whole.stream[2] == include_usage:
            return frames
        return _with_usage(endpoint, frames, whole, include_usage)
    return b"".join(chain.from_iterable(_parts(endpoint, replies.body(selections),
                                                 include_usage)))


def _with_usage(endpoint: str, frames: bytes, exchange: Saved, include_usage: bool
                ) -> bytes:
    """Recorded frames, with the usage chunk dropped (not asked for) or added before
    `[DONE]` (asked for, but the recording had none: the saved usage, null)."""
    usage = b""
    if include_usage:
        saved = orjson.loads(exchange.body)
        usage = _frame({**_envelope(endpoint, saved), "choices": [],
                        "usage": saved.get("usage")})
    if _usual(frames):
        kept = _without_usage(frames)
        if not usage:
            return kept
        done = kept.find(b"[DONE]")
        at = len(kept) if done == -1 else _frame_start(kept, done)
        return kept[:at] + usage + kept[at:]
    split = Frames()  # cut into frames as the SSE rules say
    split.feed(frames)
    split.finish()
    cut = [f for f in split.frames if not _is_usage_chunk(f)]
    at = next((i for i, f in enumerate(cut) if b"[DONE]" in f), len(cut))
    return b"".join(cut[:at] + [usage] + cut[at:])


def _usual(frames: bytes) -> bool:
    """Whether recorded frames have the usual shape: lines end in LF (no CR), the last
    frame in a blank line, and no blank line first. A frame with text then starts after
    the last blank line before it and ends with the first one after it: frames are found
    where they are needed, without cutting the whole stream into them."""
    return b"\r" not in frames and not frames.startswith(b"\n") and frames.endswith(b"\n\n")


def _frame_start(frames: bytes, inside: int) -> int:
    """Where the frame holding `frames[inside]` starts (`_usual` frames)."""
    blank = frames.rfind(b"\n\n", 0, inside)
    return 0 if blank == -1 else blank + 2


def _without_usage(frames: bytes) -> bytes:
    """`_usual` frames but their usage chunks, found by where `"usage"` is."""
    kept: list[bytes] = []
    at = 0  # kept up to here
    found = frames.find(b'"usage"')
    while found != -1:
        start, end = _frame_start(frames, found), frames.find(b"\n\n", found) + 2
        if _is_usage_chunk(frames[start:end]):
            kept.append(frames[at:start])
            at = end
        found = frames.find(b'"usage"', end)
    kept.append(frames[at:])
    return b"".join(kept)


def _is_usage_chunk(frame: bytes) -> bool:
    for line in frame.splitlines():
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                chunk = orjson.loads(line[5:].strip())
            except orjson.JSONDecodeError:
                return False
            return isinstance(chunk, dict) and chunk.get("choices") == [] and \
                chunk.get("usage") is not None
    return False


def _envelope(endpoint: str, response: dict[str, Any]) -> dict[str, Any]:
    kind = "chat.completion.chunk" if endpoint == CHAT_PATH else "text_completion"
    envelope = {"id": response.get("id"), "object": kind}
    envelope.update((k, response[k]) for k in _ENVELOPE[1:] if k in response)
    return envelope


# --------------------------------------------------------------------------- deltas


def _pieces(name: str, text: str) -> Run:
    """`text` in small deltas, each `{"delta": {name: piece}}`."""
    return Run(name, {"delta": {name: _MARK}}, text)


def _token_entries(text: str, logprobs: Any) -> list[dict[str, Any]] | None:
    """The saved chat logprob entries when their tokens spell out `text` exactly."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("token"), str) for e in entries):
        return None
    return entries if "".join(e["token"] for e in entries) == text else None


def _chat_content(content: str, logprobs: Any) -> Iterator[Delta]:
    entries = _token_entries(content, logprobs)
    if entries is not None:
        assert isinstance(logprobs, dict)
        for n, entry in enumerate(entries):  # the other lists (refusal) go with the first
            yield {"delta": {"content": entry["token"]},
                   "logprobs": {**logprobs, "content": [entry]} if n == 0 else {"content": [entry]}}
        return
    if logprobs is not None:  # logprobs that do not spell it: with the first piece
        first = first_piece(content)
        yield {"delta": {"content": first}, "logprobs": logprobs}
        content = content[len(first):]
    yield Run("content", {"delta": {"content": _MARK}}, content)


def _tool_call_deltas(calls: list[Any]) -> Iterator[Delta]:
    """Each call opens with its id, type, name and first piece of arguments; then the rest
    of its arguments, piece by piece."""
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str) or not isinstance(function, dict):
            yield {"delta": {"tool_calls": [{**call, "index": i}]}}
            continue
        first = first_piece(arguments)
        yield {"delta": {"tool_calls": [
            {**call, "index": i, "function": {**function, "arguments": first}}]}}
        marked = {"delta": {"tool_calls": [{"index": i, "function": {"arguments": _MARK}}]}}
        yield Run(("tool_call", i), marked, arguments[len(first):])


def _chat_deltas(choice: dict[str, Any]) -> Iterator[Delta]:
    message = choice.get("message") or {}
    yield {"delta": {"role": message.get("role") or "assistant", "content": ""}}
    for name in _REASONING:
        if message.get(name):
            yield _pieces(name, message[name])
    content = message.get("content")
    if content and isinstance(content, str):
        yield from _chat_content(content, choice.get("logprobs"))
    elif content:
        yield {"delta": {"content": content}, "logprobs": choice.get("logprobs")}
    elif choice.get("logprobs") is not None:
        yield {"delta": {}, "logprobs": choice.get("logprobs")}
    if message.get("refusal"):
        yield _pieces("refusal", message["refusal"])
    elif message.get("refusal") is not None:
        yield {"delta": {"refusal": message["refusal"]}}
    if message.get("function_call") is not None:
        yield {"delta": {"function_call": message["function_call"]}}
    calls = message.get("tool_calls")
    if calls:
        yield from _tool_call_deltas(calls)


_LOGPROB_LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def _completion_deltas(choice: dict[str, Any]) -> Iterator[Delta]:
    text = choice.get("text") or ""
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if isinstance(logprobs, dict) and isinstance(tokens, list) and tokens and all(
            isinstance(t, str) for t in tokens) and "".join(tokens) == text and all(
            isinstance(logprobs.get(k), list) and len(logprobs[k]) == len(tokens)
            for k in _LOGPROB_LISTS if k in logprobs):
        for i in range(len(tokens)):  # one token per delta, with its logprobs
            sliced = {k: (v[i:i + 1] if k in _LOGPROB_LISTS else v) for k, v in logprobs.items()}
            yield {"text": tokens[i], "logprobs": sliced}
        return
    first = first_piece(text)
    yield {"text": first, "logprobs": logprobs}
    yield Run("text", {"text": _MARK, "logprobs": None}, text[len(first):])


def chunks(endpoint: str, response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """SSE frames for a chat or completions body, framed like vLLM/OpenAI, in small deltas
    (the frames of a run of deltas that differ only in their text come as one bytes).

    Chat, per choice: a role chunk, reasoning deltas, content deltas (with their
    logprobs), refusal, tool-call deltas (the call, then its arguments piece by piece),
    then a chunk with `finish_reason`; completions, per choice: the text piece by piece,
    then the finish. With `include_usage`, a last chunk with no choices carries `usage`;
    then `[DONE]`.
    """
    return map(b"".join, _parts(endpoint, response, include_usage))


def _parts(endpoint: str, response: dict[str, Any], include_usage: bool
           ) -> Iterator[list[bytes]]:
    """`chunks`, each as the parts it joins from (the stream is joined once, not a run's
    frames first and then the whole)."""
    chat = endpoint == CHAT_PATH
    envelope = _envelope(endpoint, response)
    deltas = _chat_deltas if chat else _completion_deltas
    blank: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
    for choice in response["choices"]:
        index = choice["index"]
        for delta in deltas(choice):
            if isinstance(delta, Run):
                yield _run(envelope, index, delta)
                continue
            part = {"index": index, "logprobs": None, **delta, "finish_reason": None}
            yield [_frame({**envelope, "choices": [part]})]
        finish = {"index": index, **blank, "logprobs": None,
                  "finish_reason": choice.get("finish_reason")}
        if "stop_reason" in choice:
            finish["stop_reason"] = choice["stop_reason"]
        yield [_frame({**envelope, "choices": [finish]})]
    if include_usage:
        yield [_frame({**envelope, "choices": [], "usage": response.get("usage")})]
    yield [DONE]


def _run(envelope: dict[str, Any], index: int, run: Run) -> list[bytes]:
    """The frames of a run of deltas: the frame encoded once, split where the text goes,
    and the pieces put in (exactly what encoding each frame whole gives)."""
    part = {"index": index, "logprobs": None, **run.marked, "finish_reason": None}
    around = _frame({**envelope, "choices": [part]}).split(_MARK_JSON)
    joined = joined_deltas(run.text)
    if len(around) == 2 and joined is not None:
        return fill(around[0], around[1], joined)
    # a saved field holds the mark itself, or the text a "\x00" (never, in practice):
    # encode each frame whole
    marked = orjson.dumps(run.marked)
    return [_frame({**envelope, "choices": [{
        "index": index, "logprobs": None,
        **orjson.loads(marked.replace(_MARK_JSON, orjson.dumps(text))), "finish_reason": None}]})
        for text in split_deltas(run.text)]
