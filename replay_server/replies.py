"""Saved generations -> response bodies and SSE chunks. Pure functions, no HTTP.

The common case (one saved exchange answers the whole request) is the saved body, byte for
byte. Otherwise the body is assembled from the saved exchanges: the first one's envelope
(`id`, `created`, `model`, `system_fingerprint`, ...), the chosen choices re-indexed, and a
`usage` that is only ever taken or derived from saved counts, never estimated:

- one sample of a multi-sample exchange: that sample's own usage when the source saved
  one (`sample_usage`), else null;
- samples of one prompt from several exchanges: prompt_tokens once, completion_tokens
  summed (what the server reports for n > 1), when every part saved both; else null;
- a batch of prompts: the parts' counts summed, when every part has them; else null.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from .index import Selection
from .records import CHAT_PATH

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


def body(selections: list[Selection]) -> dict[str, Any]:
    """The response body for a request whose prompts got these selections, in order."""
    parts = [one_prompt(s) for s in selections]
    envelope, _, usage = parts[0]
    if len(parts) > 1:
        usage = _sum_usage([u for _, _, u in parts])
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


def _chat_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    message = choice.get("message") or {}
    yield {"delta": {"role": message.get("role") or "assistant", "content": ""}}
    reasoning = {k: message[k] for k in _REASONING if message.get(k) is not None}
    if reasoning:
        yield {"delta": reasoning}
    content = message.get("content")
    if content:
        yield {"delta": {"content": content}, "logprobs": choice.get("logprobs")}
    elif choice.get("logprobs") is not None:
        yield {"delta": {}, "logprobs": choice.get("logprobs")}
    for name in ("refusal", "function_call"):
        if message.get(name) is not None:
            yield {"delta": {name: message[name]}}
    calls = message.get("tool_calls")
    if calls:
        yield {"delta": {"tool_calls": [{**call, "index": i} for i, call in enumerate(calls)]}}


def _completion_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield {"text": choice.get("text") or "", "logprobs": choice.get("logprobs")}


def chunks(endpoint: str, response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """SSE frames for a response body, framed like vLLM/OpenAI.

    Chat, per choice: a role chunk, reasoning deltas, content deltas, tool-call deltas,
    then a chunk with `finish_reason`; completions, per choice: the text, then the finish.
    With `include_usage`, a last chunk with no choices carries `usage`; then `[DONE]`.
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
