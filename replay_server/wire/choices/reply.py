"""Saved generations -> a chat or completions response body. Pure functions, no HTTP.

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

Streams are made in `stream_out.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..selection import Saved, Selection, whole


def _counts(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (isinstance(prompt, int) and isinstance(completion, int)):
        return None
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def one_prompt(selection: Selection[Saved]) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
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
    prompt = completion = 0
    for usage in usages:
        counts = _counts(usage)
        if counts is None:
            return None
        prompt += counts["prompt_tokens"]
        completion += counts["completion_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _same_batch(selections: Sequence[Selection[Saved]]) -> dict[str, Any] | None:
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


def body(selections: Sequence[Selection[Saved]]) -> dict[str, Any]:
    """The response body for a request whose prompts got these selections, in order."""
    parts = [one_prompt(s) for s in selections]
    envelope, _, usage = parts[0]
    if len(parts) > 1:
        batch = _same_batch(selections)
        usage = batch["usage"] if batch is not None else _sum_usage([u for _, _, u in parts])
    choices = [c for _, cs, _ in parts for c in cs]
    return {**envelope, "choices": [{**c, "index": i} for i, c in enumerate(choices)],
            "usage": usage}


def encode(selections: Sequence[Selection[Saved]]) -> bytes:
    """Body bytes: the saved bytes themselves when one whole exchange answers."""
    exchange = whole(selections)
    return exchange.body if exchange is not None else orjson.dumps(body(selections))
