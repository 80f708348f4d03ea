"""Saved generations -> response bodies and SSE chunks. Pure functions, no HTTP.

The common case (one saved exchange answers the whole request) is the saved body, byte for
byte. Otherwise the body is assembled from the saved exchanges: the first one's envelope
(`id`, `created`, `model`, `system_fingerprint`, ...), the chosen choices re-indexed, and a
`usage` that is only ever taken or derived from saved counts, never estimated:

- one sample of a multi-sample exchange: that sample's own usage when the source saved
  one (`sample_usage`), else null;
- samples of one prompt from several exchanges: prompt_tokens once, completion_tokens
  summed (what the server reports for n > 1), when every part saved both; else null;
- a batch of prompts: the batch's own saved usage when the request is that same saved
  batch (the same prompts, in the same order, from one recorded exchange); else the
  parts' counts summed, when every part has them; else null.

Streams: a recorded stream is sent again as its saved frames, byte for byte (for chat and
completions, with its usage chunk dropped or added when the request's
`stream_options.include_usage` differs from the recording's); any other answer (an
import, a non-streamed recording, an answer assembled from several samples) is streamed in
small deltas (`openai_responses.split_deltas`: a word, or one other character, with the
whitespace before it; logprobs that spell out the text give one delta per token), never as
one delta.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from .index import Exchange, Selection
from .openai_responses import RESPONSES_PATH, events_for, split_deltas
from .records import CHAT_PATH
from .sse import Frames

_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _counts(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    if not all(isinstance(usage.get(k), int) for k in _COUNTS[:2]):
        return None
    return {k: usage[k] for k in _COUNTS[:2]}


def one_prompt(selection: Selection) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    """(envelope, choices, usage) of the samples chosen for one prompt."""
    decoded: dict[int, dict[str, Any]] = {}
    choices: list[dict[str, Any]] = []
    usages: list[Any] = []
    for exchange, c in selection:
        body = decoded.get(id(exchange))
        if body is None:
            body = decoded[id(exchange)] = orjson.loads(exchange.body)
        if c is None:
            choices.extend(body["choices"])
            usages.append(body.get("usage"))
        else:
            choices.append(body["choices"][c])
            own = exchange.sample_usage[c] if exchange.sample_usage is not None else None
            usages.append(own)
    envelope = decoded[id(selection[0][0])]
    if len(usages) == 1:
        return envelope, choices, usages[0]
    counts = [_counts(u) for u in usages]
    usage = None
    if all(counts):
        completion = sum(c["completion_tokens"] for c in counts if c)
        prompt = counts[0]["prompt_tokens"] if counts[0] else 0
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}
    return envelope, choices, usage


def _sum_usage(usages: list[Any]) -> dict[str, int] | None:
    counts = [_counts(u) for u in usages]
    if not all(counts):
        return None
    prompt = sum(c["prompt_tokens"] for c in counts if c)
    completion = sum(c["completion_tokens"] for c in counts if c)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _same_batch(selections: list[Selection]) -> dict[str, Any] | None:
    """The saved batch these selections are, whole and in order, or None."""
    if len(selections) < 2 or any(len(s) != 1 or s[0][1] is not None for s in selections):
        return None
    batches = [s[0][0].batch for s in selections]
    first = batches[0]
    if first is None or first["size"] != len(selections):
        return None
    if all(b is not None and b["id"] == first["id"] and b["index"] == i
           for i, b in enumerate(batches)):
        return first
    return None


def body(selections: list[Selection]) -> dict[str, Any]:
    """The response body for a request whose prompts got these selections, in order."""
    parts = [one_prompt(s) for s in selections]
    envelope, _, usage = parts[0]
    if len(parts) > 1:
        batch = _same_batch(selections)
        usage = batch["usage"] if batch is not None else _sum_usage([u for _, _, u in parts])
    choices = [c for _, cs, _ in parts for c in cs]
    return {**envelope, "choices": [{**c, "index": i} for i, c in enumerate(choices)],
            "usage": usage}


def encode(selections: list[Selection]) -> bytes:
    """Body bytes: the saved bytes themselves when one whole exchange answers."""
    if len(selections) == 1 and len(selections[0]) == 1 and selections[0][0][1] is None:
        return selections[0][0][0].body
    return orjson.dumps(body(selections))


def _frame(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


DONE = b"data: [DONE]\n\n"
_ENVELOPE = ("id", "created", "model", "system_fingerprint")
_REASONING = ("reasoning", "reasoning_content")


def _whole(selections: list[Selection]) -> Exchange | None:
    """The one saved exchange that answers the request whole, if that is the case."""
    if len(selections) == 1 and len(selections[0]) == 1 and selections[0][0][1] is None:
        return selections[0][0][0]
    return None


def stream(endpoint: str, selections: list[Selection], include_usage: bool) -> bytes:
    """The whole SSE stream for a request: the recorded frames when one recorded stream
    answers it whole, else frames made from the body in small deltas."""
    whole = _whole(selections)
    if endpoint == RESPONSES_PATH:
        assert whole is not None  # one sample per request: always one whole exchange
        frames = whole.frames
        return frames if frames is not None else b"".join(events_for(orjson.loads(whole.body)))
    if whole is not None and whole.stream is not None:
        frames = whole.frames
        assert frames is not None
        if whole.stream[2] == include_usage:
            return frames
        return _with_usage(endpoint, frames, whole, include_usage)
    return b"".join(chunks(endpoint, body(selections), include_usage))


def _with_usage(endpoint: str, frames: bytes, exchange: Exchange, include_usage: bool
                ) -> bytes:
    """Recorded frames, with the usage chunk dropped (not asked for) or added before
    `[DONE]` (asked for, but the recording had none: the saved usage, null)."""
    split = Frames()
    split.feed(frames)
    split.finish()
    kept = [f for f in split.frames if not _is_usage_chunk(f)]
    if not include_usage:
        return b"".join(kept)
    saved = orjson.loads(exchange.body)
    kind = "chat.completion.chunk" if endpoint == CHAT_PATH else "text_completion"
    envelope = {"id": saved.get("id"), "object": kind}
    envelope.update((k, saved[k]) for k in _ENVELOPE[1:] if k in saved)
    usage = _frame({**envelope, "choices": [], "usage": saved.get("usage")})
    at = next((i for i, f in enumerate(kept) if b"[DONE]" in f), len(kept))
    return b"".join(kept[:at] + [usage] + kept[at:])


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


def _token_pieces(text: str, tokens: Any) -> list[int] | None:
    """How many logprob entries go with each delta when the saved logprob tokens spell out
    `text` exactly (one token per delta), else None."""
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        return None
    return [1] * len(tokens) if "".join(tokens) == text else None


def _chat_content(content: str, logprobs: Any) -> Iterator[dict[str, Any]]:
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    tokens = [e.get("token") for e in entries] if isinstance(entries, list) and all(
        isinstance(e, dict) for e in entries) else None
    if tokens is not None and _token_pieces(content, tokens) is not None:
        assert isinstance(entries, list) and isinstance(logprobs, dict)
        for n, entry in enumerate(entries):  # the other lists (refusal) go with the first
            yield {"delta": {"content": entry["token"]},
                   "logprobs": {**logprobs, "content": [entry]} if n == 0 else {"content": [entry]}}
        return
    for n, piece in enumerate(split_deltas(content)):
        yield {"delta": {"content": piece}, "logprobs": logprobs if n == 0 else None}


def _tool_call_deltas(calls: list[Any]) -> Iterator[dict[str, Any]]:
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str) or not isinstance(function, dict):
            yield {"delta": {"tool_calls": [{**call, "index": i}]}}
            continue
        pieces = split_deltas(arguments) or [""]
        first = {**call, "index": i, "function": {**function, "arguments": pieces[0]}}
        yield {"delta": {"tool_calls": [first]}}
        for piece in pieces[1:]:
            yield {"delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}}


def _chat_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    message = choice.get("message") or {}
    yield {"delta": {"role": message.get("role") or "assistant", "content": ""}}
    for name in _REASONING:
        if message.get(name):
            for piece in split_deltas(message[name]):
                yield {"delta": {name: piece}}
    content = message.get("content")
    if content and isinstance(content, str):
        yield from _chat_content(content, choice.get("logprobs"))
    elif content:
        yield {"delta": {"content": content}, "logprobs": choice.get("logprobs")}
    elif choice.get("logprobs") is not None:
        yield {"delta": {}, "logprobs": choice.get("logprobs")}
    if message.get("refusal"):
        for piece in split_deltas(message["refusal"]):
            yield {"delta": {"refusal": piece}}
    elif message.get("refusal") is not None:
        yield {"delta": {"refusal": message["refusal"]}}
    if message.get("function_call") is not None:
        yield {"delta": {"function_call": message["function_call"]}}
    calls = message.get("tool_calls")
    if calls:
        yield from _tool_call_deltas(calls)


_LOGPROB_LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def _completion_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    text = choice.get("text") or ""
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    lists_fit = isinstance(logprobs, dict) and all(
        isinstance(logprobs.get(k), list) and len(logprobs[k]) == len(tokens or [])
        for k in _LOGPROB_LISTS if k in logprobs)
    if lists_fit and _token_pieces(text, tokens) is not None:
        assert isinstance(logprobs, dict) and isinstance(tokens, list)
        for i in range(len(tokens)):
            sliced = {k: (v[i:i + 1] if k in _LOGPROB_LISTS else v) for k, v in logprobs.items()}
            yield {"text": tokens[i], "logprobs": sliced}
        return
    pieces = split_deltas(text) or [""]
    for n, piece in enumerate(pieces):
        yield {"text": piece, "logprobs": logprobs if n == 0 else None}


def chunks(endpoint: str, response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """SSE frames for a response body, framed like vLLM/OpenAI, in small deltas.

    Chat, per choice: a role chunk, reasoning deltas, content deltas (with their
    logprobs), refusal, tool-call deltas (the call, then its arguments piece by piece),
    then a chunk with `finish_reason`; completions, per choice: the text piece by piece,
    then the finish. With `include_usage`, a last chunk with no choices carries `usage`;
    then `[DONE]`.
    """
    chat = endpoint == CHAT_PATH
    kind = "chat.completion.chunk" if chat else "text_completion"
    envelope = {"id": response.get("id"), "object": kind}
    envelope.update((k, response[k]) for k in _ENVELOPE[1:] if k in response)
    deltas = _chat_deltas if chat else _completion_deltas
    blank: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
    for choice in response["choices"]:
        index = choice["index"]
        for delta in deltas(choice):
            part = {"index": index, "logprobs": None, **delta, "finish_reason": None}
            yield _frame({**envelope, "choices": [part]})
        finish = {"index": index, **blank, "logprobs": None,
                  "finish_reason": choice.get("finish_reason")}
        if "stop_reason" in choice:
            finish["stop_reason"] = choice["stop_reason"]
        yield _frame({**envelope, "choices": [finish]})
    if include_usage:
        yield _frame({**envelope, "choices": [], "usage": response.get("usage")})
    yield DONE
