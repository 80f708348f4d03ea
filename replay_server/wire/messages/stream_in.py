"""A Messages stream in: named SSE events as they arrive -> the message a plain request
gets, checked as it is built.

`message_start` carries the message (empty `content`, a first `usage`); each block is a
`content_block_start` (its `index`, the block emptied), deltas (`text_delta`,
`thinking_delta`, `signature_delta`, `input_json_delta` whose `partial_json` fragments
join to the tool call's `input`, `citations_delta`) and a `content_block_stop`; then
`message_delta`s (`delta`: `stop_reason`, `stop_sequence`; `usage`, cumulative: each
field it sets replaces the earlier count) and `message_stop`. `ping` may come anywhere and
unknown events are passed over (the recorded frames are replayed as they are); an `error`
event is no answer. This is how the SDK's `get_final_message()` builds the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .. import sse
from ..sse import StreamError

# A delta type -> the block field it adds its text to.
_TEXT_DELTAS = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
                "signature_delta": ("signature", "signature"),
                "input_json_delta": ("partial_json", "$partial_json")}


class MessagesStreamAggregator:
    """Takes a Messages stream as it arrives (`feed`, in chunks cut anywhere); `result` is
    the whole message. Raises StreamError, and only that, for a stream that is no answer:
    an `error` event, a delta for a block not started, a stream ended before
    `message_stop`, a tool call whose `partial_json` is not JSON."""

    def __init__(self) -> None:
        self._frames = sse.Frames()
        self.frames = self._frames.frames
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stopped = False

    def feed(self, data: bytes) -> bool:
        """Take more bytes; True once `message_stop` has arrived."""
        for frame in self._frames.feed(data):
            self._dispatch(frame)
        return self.stopped

    def finish(self) -> None:
        rest = self._frames.finish()
        if rest:
            self._dispatch(rest)

    def _dispatch(self, frame: bytes) -> None:
        data = sse.data_of(frame)
        if not data or self.stopped:
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise StreamError(f"a stream event is not JSON: {e}") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise StreamError(f"a stream event has no type: {data[:200]!r}")
        kind = event["type"]
        if kind == "error":
            raise StreamError(f"the stream carried an error: {orjson.dumps(event).decode()[:300]}")
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise StreamError("`message_start` carries no message object")
            self.message = message
            return
        if kind in ("ping",) or not kind.startswith(("message_", "content_block_")):
            return
        if self.message is None:
            raise StreamError(f"`{kind}` before `message_start`")
        if kind == "message_stop":
            self.stopped = True
        elif kind == "message_delta":
            self._message_delta(event)
        else:
            self._block_event(kind, event)

    def _message_delta(self, event: dict[str, Any]) -> None:
        assert self.message is not None
        delta = event.get("delta")
        if isinstance(delta, dict):
            self.message = {**self.message, **delta}
        usage = event.get("usage")
        if isinstance(usage, dict):
            before = self.message.get("usage")
            base = before if isinstance(before, dict) else {}
            self.message = {**self.message, "usage": {
                **base, **{k: v for k, v in usage.items() if v is not None}}}

    def _block_event(self, kind: str, event: dict[str, Any]) -> None:
        index = event.get("index")
        if not isinstance(index, int):
            raise StreamError(f"`{kind}` has no integer `index`")
        if kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, dict) or index in self.blocks:
                raise StreamError(f"`content_block_start` #{index}: no block, or a second one")
            self.blocks[index] = dict(block)
            return
        block = self.blocks.get(index)
        if block is None:
            raise StreamError(f"`{kind}` for block #{index}, which was not started")
        if kind == "content_block_delta":
            _apply(block, event.get("delta"), index)
        elif kind == "content_block_stop":
            _close(block, index)

    def result(self, ended: bool = False) -> dict[str, Any]:
        """The whole message; a Messages stream is whole at `message_stop` only (`ended`
        changes nothing)."""
        if self.message is None or not self.stopped:
            raise StreamError("the stream ended before `message_stop`")
        for index, block in self.blocks.items():
            _close(block, index)
        content = [self.blocks[i] for i in sorted(self.blocks)]
        return {**self.message, "content": content}


def _apply(block: dict[str, Any], delta: Any, index: int) -> None:
    if not isinstance(delta, dict):
        raise StreamError(f"`content_block_delta` #{index} has no delta object")
    kind = delta.get("type")
    if kind == "citations_delta":
        citations = block.get("citations")
        block["citations"] = [*(citations if isinstance(citations, list) else []),
                              delta.get("citation")]
        return
    if kind not in _TEXT_DELTAS:
        return  # a delta type of a newer API: its frames are replayed as they are
    source, target = _TEXT_DELTAS[kind]
    text = delta.get(source)
    if not isinstance(text, str):
        raise StreamError(f"a `{kind}` of block #{index} has no string `{source}`")
    before = block.get(target)
    block[target] = (before if isinstance(before, str) else "") + text


def _close(block: dict[str, Any], index: int) -> None:
    """A tool call's joined `partial_json` parsed as its `input` (none: the input it
    started with)."""
    joined = block.pop("$partial_json", None)
    if joined is None or joined == "":
        return
    try:
        block["input"] = orjson.loads(joined)
    except orjson.JSONDecodeError as e:
        raise StreamError(f"block #{index}: the tool call's `partial_json` is not JSON: "
                          f"{e}") from None


def aggregate(stream: bytes | Iterable[bytes]) -> dict[str, Any]:
    """A whole Messages stream -> its message (StreamError if it is none)."""
    aggregator = MessagesStreamAggregator()
    for chunk in [stream] if isinstance(stream, bytes) else stream:
        aggregator.feed(chunk)
    aggregator.finish()
    return aggregator.result()
