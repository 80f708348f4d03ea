"""A Messages stream out: the named SSE events Anthropic's API sends for a saved message,
its texts cut into token-sized deltas (`pieces.split_deltas`).

`message_start` (the message with no content, `stop_reason` and `stop_sequence` null, its
usage as the API's first one: the input counts, `output_tokens` at most 1), then per block
`content_block_start` (the block emptied: text, thinking and signature "", a tool call's
`input` {}), its deltas (`text_delta`, `thinking_delta`, one `signature_delta`,
`input_json_delta` pieces of the input's JSON, a `citations_delta` per citation) and
`content_block_stop`; a block of any other type starts whole. Then `message_delta` with
the saved `stop_reason` and `stop_sequence` and the usage the API sends there (the saved
`output_tokens`, and the input counts the saved usage holds), and `message_stop`.
`stream_in` aggregates it back to the saved message exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from ..pieces import split_deltas
from ..selection import Saved, Selection, whole

# the usage fields message_delta carries, besides output_tokens (as the API sends them)
_DELTA_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                "server_tool_use")


def frame(event: dict[str, Any]) -> bytes:
    """One SSE frame: `event: <type>` and the compact JSON payload."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _start_usage(usage: Any) -> Any:
    if not isinstance(usage, dict):
        return usage
    out = dict(usage)
    if isinstance(out.get("output_tokens"), int):
        out["output_tokens"] = min(out["output_tokens"], 1)
    return out


def _delta_usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    return {k: usage[k] for k in ("output_tokens", *_DELTA_USAGE) if k in usage}


def events_for(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The event payloads of a saved message's stream, in order."""
    unset: dict[str, Any] = {k: None for k in ("stop_reason", "stop_sequence") if k in message}
    start = {**message, "content": [], **unset}
    if "usage" in message:
        start["usage"] = _start_usage(message["usage"])
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    content = message.get("content")
    for index, block in enumerate(content if isinstance(content, list) else []):
        events += _block_events(index, block)
    delta: dict[str, Any] = {"type": "message_delta", "delta": {
        k: message[k] for k in ("stop_reason", "stop_sequence") if k in message}}
    usage = _delta_usage(message.get("usage"))
    if usage is not None:
        delta["usage"] = usage
    events += [delta, {"type": "message_stop"}]
    return events


def _block_events(index: int, block: Any) -> Iterator[dict[str, Any]]:
    def delta(body: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": body}

    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and isinstance(block.get("text"), str):
        citations = block.get("citations")
        empty = {**block, "text": ""}
        if isinstance(citations, list):
            empty["citations"] = []
        yield {"type": "content_block_start", "index": index, "content_block": empty}
        for piece in split_deltas(block["text"]):
            yield delta({"type": "text_delta", "text": piece})
        for citation in citations if isinstance(citations, list) else []:
            yield delta({"type": "citations_delta", "citation": citation})
    elif kind == "thinking" and isinstance(block.get("thinking"), str) \
            and isinstance(block.get("signature", ""), str):
        empty = {**block, "thinking": ""}
        if "signature" in block:
            empty["signature"] = ""
        yield {"type": "content_block_start", "index": index, "content_block": empty}
        for piece in split_deltas(block["thinking"]):
            yield delta({"type": "thinking_delta", "thinking": piece})
        if block.get("signature"):
            yield delta({"type": "signature_delta", "signature": block["signature"]})
    elif kind in ("tool_use", "server_tool_use") and isinstance(block.get("input"), dict):
        yield {"type": "content_block_start", "index": index,
               "content_block": {**block, "input": {}}}
        if block["input"]:
            for piece in split_deltas(orjson.dumps(block["input"]).decode()):
                yield delta({"type": "input_json_delta", "partial_json": piece})
    else:
        yield {"type": "content_block_start", "index": index, "content_block": block}
    yield {"type": "content_block_stop", "index": index}


def stream_for(message: dict[str, Any]) -> bytes:
    return b"".join(frame(e) for e in events_for(message))


def stream(selections: Sequence[Selection[Saved]], include_usage: bool) -> bytes:
    """The whole SSE stream of a reply: the recorded frames, or the events of the saved
    message (one whole saved message always answers: a Messages request has no `n`)."""
    exchange = whole(selections)
    assert exchange is not None
    frames = exchange.frames
    return frames if frames is not None else stream_for(orjson.loads(exchange.body))
