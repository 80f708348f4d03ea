"""A Responses API stream in: SSE frames as they arrive -> the final response body, the
event payloads and the raw frames, checked against each other."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from .. import sse
from ..sse import StreamError

# Item types whose one string field streams as deltas: (field, delta event prefix).
STREAMED_FIELD = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
    "mcp_call": ("arguments", "response.mcp_call_arguments"),
}
# Part types of a message or reasoning item: (the part's text field, delta event prefix).
PART_TEXT = {
    "output_text": ("text", "response.output_text"),
    "refusal": ("refusal", "response.refusal"),
    "reasoning_text": ("text", "response.reasoning_text"),
}
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed",
                       "error"})
_PART_DELTAS = {f"{prefix}.delta": name for name, (_, prefix) in PART_TEXT.items()}
_FIELD_DELTAS = {f"{prefix}.delta": kind for kind, (_, prefix) in STREAMED_FIELD.items()}


@dataclass
class Aggregated:
    """A whole stream: the final body, the event payloads and the raw SSE frames (each with
    its blank line; joined they give the stream's bytes back)."""

    response: dict[str, Any]
    events: list[dict[str, Any]]
    frames: list[bytes]


class ResponsesStreamAggregator:
    """Takes a Responses stream as it arrives (`feed`, in chunks cut anywhere) and gives
    the final response body (`result`).

    The final body is `response.completed`'s (or `response.incomplete`'s) `response`; when
    that carries no `output` (OpenAI may leave it out), the `response.output_item.done`
    items in `output_index` order. With `check` (the default) `result` also requires that
    the deltas agree with it: per output item the joined text, refusal, reasoning,
    summary and argument deltas equal the final item's, and the `*.done` events say the
    same. Item ids are not compared: vLLM streams its items under other ids than the final
    body's. The stream is cut into frames by the SSE rules (`sse.Frames`), as every stream
    is; `events` are their payloads and `frames` their bytes.
    """

    def __init__(self, check: bool = True) -> None:
        self.check = check
        self.events: list[dict[str, Any]] = []
        self.terminal: dict[str, Any] | None = None
        self._frames = sse.Frames()
        self.frames = self._frames.frames

    @property
    def done(self) -> bool:
        return self.terminal is not None

    def feed(self, data: bytes) -> bool:
        """Take more bytes of the stream; True once a terminal event has arrived
        (`response.completed`, `response.incomplete`, `response.failed` or `error`)."""
        for frame in self._frames.feed(data):
            self._dispatch(frame)
        return self.done

    def finish(self) -> None:
        """The stream has ended: a last event without its blank line is taken as it is."""
        rest = self._frames.finish()
        if rest:
            self._dispatch(rest)

    def _dispatch(self, frame: bytes) -> None:
        data = sse.data_of(frame)
        if not data or data.strip() == b"[DONE]":
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise StreamError(f"a stream event is not JSON: {e}") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise StreamError(f"a stream event has no type: {data[:200]!r}")
        self.events.append(event)
        if event["type"] in _TERMINAL and self.terminal is None:
            self.terminal = event

    def result(self, ended: bool = False) -> dict[str, Any]:
        """The final response; a Responses stream is whole at its terminal event only
        (`ended` changes nothing)."""
        terminal = self.terminal
        if terminal is None:
            raise StreamError("the stream ended before `response.completed`")
        if terminal["type"] == "error":
            raise StreamError(f"the stream carried an error: {_brief(terminal)}")
        response = terminal.get("response")
        if not isinstance(response, dict):
            raise StreamError(f"`{terminal['type']}` carries no response object")
        if terminal["type"] == "response.failed":
            raise StreamError(
                f"the response failed: {_brief(response.get('error') or response)}")
        items = _done_items(self.events)
        if response.get("output") is None:
            response = {**response, "output": [items[i] for i in sorted(items)]}
        if self.check:
            problems = check_stream(self.events, response)
            if problems:
                raise StreamError("the stream does not match its final response: "
                                           + "; ".join(problems[:5]))
        return response

    def aggregated(self) -> Aggregated:
        return Aggregated(self.result(), self.events, self.frames)


def _brief(value: Any) -> str:
    return orjson.dumps(value).decode()[:300]


def aggregate(stream: bytes | Iterable[bytes], check: bool = True) -> Aggregated:
    """A whole Responses stream (bytes, or chunks of it) -> its final body, events, frames
    (StreamError if it has none)."""
    aggregator = ResponsesStreamAggregator(check=check)
    for chunk in [stream] if isinstance(stream, bytes) else stream:
        aggregator.feed(chunk)
    aggregator.finish()
    return aggregator.aggregated()


def _done_items(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {e["output_index"]: e["item"] for e in events
            if e["type"] == "response.output_item.done" and isinstance(e.get("item"), dict)
            and isinstance(e.get("output_index"), int)}


def check_stream(events: list[dict[str, Any]], response: dict[str, Any]) -> list[str]:
    """Where a stream's events disagree with its final response (empty: they agree)."""
    problems: list[str] = []
    last = -1
    for event in events:
        number_ = event.get("sequence_number")
        if isinstance(number_, int):
            if number_ <= last:
                problems.append(f"sequence_number {number_} after {last}")
            last = number_
    output = response.get("output")
    if not isinstance(output, list):
        return [*problems, "the final response has no output list"]
    joined: dict[tuple[int, str, int], str] = {}
    for event in events:
        kind, at = event["type"], event.get("output_index")
        if not isinstance(at, int) or not isinstance(event.get("delta"), str):
            continue
        if kind in _PART_DELTAS:
            slot = (at, _PART_DELTAS[kind], event.get("content_index", 0))
        elif kind == "response.reasoning_summary_text.delta":
            slot = (at, "summary_text", event.get("summary_index", 0))
        elif kind in _FIELD_DELTAS:
            slot = (at, _FIELD_DELTAS[kind], 0)
        else:
            continue
        joined[slot] = joined.get(slot, "") + event["delta"]
    finals = {slot: _final_text(output, slot) for slot in joined}
    for slot, text in joined.items():
        if finals[slot] != text:
            problems.append(f"output[{slot[0]}] {slot[1]} #{slot[2]}: the deltas join to "
                            f"{text[:60]!r}, the final response says {finals[slot]!r:.60}")
    for index, item in _done_items(events).items():
        final = output[index] if index < len(output) else None
        if not isinstance(final, dict) or final.get("type") != item.get("type"):
            problems.append(f"output_item.done #{index} ({item.get('type')}) is not in the "
                            "final response")
        elif _texts(item) != _texts(final):
            problems.append(f"output_item.done #{index} has other text than the final item")
    return problems


def _final_text(output: list[Any], slot: tuple[int, str, int]) -> str | None:
    index, kind, sub = slot
    item = output[index] if index < len(output) else None
    if not isinstance(item, dict):
        return None
    if kind in STREAMED_FIELD:
        value = item.get(STREAMED_FIELD[kind][0])
        return value if isinstance(value, str) else None
    parts = item.get("summary" if kind == "summary_text" else "content")
    if not isinstance(parts, list) or sub >= len(parts) or not isinstance(parts[sub], dict):
        return None
    value = parts[sub].get(PART_TEXT.get(kind, ("text", ""))[0])
    return value if isinstance(value, str) else None


def _texts(item: dict[str, Any]) -> list[Any]:
    """What an item says, ids and statuses aside."""
    out: list[Any] = [item.get(k) for k in ("name", "call_id", "arguments", "input")]
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list):
            out.append([(p.get("type"), p.get("text"), p.get("refusal"))
                        for p in parts if isinstance(p, dict)])
    return out

