"""A Responses API stream out: the SSE frames a server sends for a saved response, its
text and arguments cut into token-sized deltas (`pieces.split_deltas`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import orjson

from ..pieces import ESCAPED_MARKER, joined_deltas, split_deltas
from ..selection import Saved, Selection, whole
from .stream_in import PART_TEXT, STREAMED_FIELD


def frame(event: dict[str, Any]) -> bytes:
    """One SSE frame: `event: <type>` and the compact JSON payload."""
    kind = str(event["type"]).encode()
    return b"event: " + kind + b"\ndata: " + orjson.dumps(event) + b"\n\n"


_TERMINAL_BY_STATUS = {"incomplete": "response.incomplete", "failed": "response.failed"}


def events_for(response: dict[str, Any], *, terminal_by_status: bool = False) -> list[bytes]:
    """The SSE frames a server streams for `response`, a saved non-streamed body.

    `response.created` and `response.in_progress` (the response with `status:
    "in_progress"`, no output, `usage` null), then per output item `output_item.added`
    (the item with its text emptied and `status: "in_progress"`), its parts with their text
    in `split_deltas` pieces (or one delta per token where the part saved `logprobs`
    covering its text), `*.done` events, `output_item.done` (the saved item), and last
    `response.completed` with the saved response itself. vLLM ends every stream with
    `response.completed`, whatever the status; with `terminal_by_status` an `incomplete`
    or `failed` response ends with `response.incomplete` / `response.failed`, as OpenAI's
    does (openai-python's `get_final_response()` then raises: it wants
    `response.completed`). Ids are the saved ones; an item without an id (a
    `function_call` may have none) gets `item_<output_index>` in its events only.

    The frames of `stream_for`, cut at their blank lines (a frame's JSON holds no raw
    line break: each frame is its `event:` line, its `data:` line and a blank line).
    """
    stream = stream_for(response, terminal_by_status=terminal_by_status)
    return [f + b"\n\n" for f in stream.split(b"\n\n")[:-1]]


def stream_for(response: dict[str, Any], *, terminal_by_status: bool = False) -> bytes:
    """The whole stream of `events_for`, made in one join: a run of deltas of one part is
    encoded once, as a template split where the sequence number and the text go, and its
    frames are the template's parts laid out around them (`_run_parts`); the bytes are
    those of encoding each event whole."""
    parts: list[bytes] = []
    for event in _sequenced(response, terminal_by_status):
        if isinstance(event, dict):
            parts.append(frame(event))
        else:
            parts += _run_parts(*event)
    return b"".join(parts)


def event_payloads(response: dict[str, Any], *, terminal_by_status: bool = False
                   ) -> list[dict[str, Any]]:
    """The event payloads of `events_for`, in order, sequence numbers set."""
    events: list[dict[str, Any]] = []
    for event in _sequenced(response, terminal_by_status):
        if isinstance(event, dict):
            events.append(event)
        else:
            run, first = event
            texts = [orjson.loads(b'"%s"' % piece) for piece in run.pieces]
            events += [{"type": run.kind, "sequence_number": first + n,
                        **{k: (text if v is _MARK else v) for k, v in run.fields.items()}}
                       for n, text in enumerate(texts)]
    return events


class _Run(NamedTuple):
    """Delta events of one part that differ only in their text (one per piece): `fields`
    are the event's fields with `_MARK` where the text goes, `pieces` the texts as they
    are written in a JSON string (`_pieces`)."""

    kind: str
    fields: dict[str, Any]
    pieces: list[bytes]


def _pieces(text: str) -> list[bytes]:
    """The `split_deltas` pieces of `text`, each escaped as in a JSON string (no quotes):
    all escaped at once and cut at the marks, not one encoding per piece."""
    joined = joined_deltas(text)
    if joined is None:  # the text holds what marks the cuts
        return [orjson.dumps(piece)[1:-1] for piece in split_deltas(text)]
    return orjson.dumps(joined)[1:-1].split(ESCAPED_MARKER) if joined else []


_MARK = "\x00\x01replay-mark\x01\x00"  # stands for a value in a template
_MARK_JSON = orjson.dumps(_MARK)


def _sequenced(response: dict[str, Any], terminal_by_status: bool
               ) -> Iterator[dict[str, Any] | tuple[_Run, int]]:
    """The events in order with their sequence numbers: payloads, and runs of deltas with
    the sequence number of their first."""
    number = 0

    def event(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        nonlocal number
        number += 1
        return {"type": kind, "sequence_number": number - 1, **fields}

    start = {**response, "status": "in_progress", "output": [], "usage": None}
    for name in ("incomplete_details", "completed_at", "error"):
        if name in start:
            start[name] = None
    yield event("response.created", {"response": start})
    yield event("response.in_progress", {"response": start})
    for index, item in enumerate(response.get("output") or []):
        for step in _item_events(index, item):
            if isinstance(step, _Run):
                yield step, number
                number += len(step.pieces)
            else:
                yield event(*step)
    status = response.get("status")
    last = _TERMINAL_BY_STATUS.get(status, "response.completed") if (
        terminal_by_status and isinstance(status, str)) else "response.completed"
    yield event(last, {"response": response})


def _run_parts(run: _Run, first: int) -> list[bytes]:
    """The frames of a run, as parts that joined are they: the template's head, then for
    each piece its sequence number, the template's middle, the piece, and the template's
    tail (with the next frame's head), laid out by slice (no step of Python's a frame)."""
    template = frame({"type": run.kind, "sequence_number": _MARK, **run.fields})
    parts = template.split(_MARK_JSON)
    count = len(run.pieces)
    if len(parts) != 3:  # a saved value holds the mark itself (never, in practice)
        return [frame({"type": run.kind, "sequence_number": first + n, **{
            k: (orjson.loads(b'"%s"' % piece) if v is _MARK else v)
            for k, v in run.fields.items()}}) for n, piece in enumerate(run.pieces)]
    if not count:
        return []
    head, middle, tail = parts
    out = [head] * (4 * count + 1)
    out[1::4] = _numbers(first, count)
    out[2::4] = [middle + b'"'] * count
    out[3::4] = run.pieces
    out[4::4] = [b'"' + tail + head] * count
    out[-1] = b'"' + tail
    return out


_NUMBERS = orjson.dumps(list(range(2048)))[1:-1].split(b",")  # sequence numbers, written


def _numbers(first: int, count: int) -> list[bytes]:
    if first + count <= len(_NUMBERS):
        return _NUMBERS[first:first + count]
    return orjson.dumps(list(range(first, first + count)))[1:-1].split(b",") if count else []


def _skeleton(item: dict[str, Any]) -> dict[str, Any]:
    """The item as `output_item.added` shows it: its texts not yet there."""
    streamed = STREAMED_FIELD.get(item.get("type", ""), ("", ""))[0]
    out: dict[str, Any] = {}
    for key, value in item.items():
        if key in ("content", "summary") and isinstance(value, list):
            out[key] = []
        elif key == streamed:
            out[key] = ""
        elif key == "status" and value is not None:
            out[key] = "in_progress"
        else:
            out[key] = value
    return out


Event = tuple[str, dict[str, Any]] | _Run


def _item_events(index: int, item: Any) -> Iterator[Event]:
    if not isinstance(item, dict):
        yield "response.output_item.added", {"output_index": index, "item": item}
        yield "response.output_item.done", {"output_index": index, "item": item}
        return
    item_id = item.get("id") if isinstance(item.get("id"), str) else f"item_{index}"
    at = {"item_id": item_id, "output_index": index}
    yield "response.output_item.added", {"output_index": index, "item": _skeleton(item)}
    kind = item.get("type")
    if kind in STREAMED_FIELD:
        name, prefix = STREAMED_FIELD[kind]
        value = item.get(name)
        if isinstance(value, str):
            yield _Run(f"{prefix}.delta", {**at, "delta": _MARK}, _pieces(value))
            yield f"{prefix}.done", {**at, name: value}
    summary = item.get("summary")
    if kind == "reasoning" and isinstance(summary, list):
        for sub, part in enumerate(summary):
            yield from _summary_events(at, sub, part)
    content = item.get("content")
    if isinstance(content, list):
        for sub, part in enumerate(content):
            yield from _part_events(at, sub, part)
    yield "response.output_item.done", {"output_index": index, "item": item}


def _summary_events(at: dict[str, Any], sub: int, part: Any) -> Iterator[Event]:
    where = {**at, "summary_index": sub}
    text = part.get("text") if isinstance(part, dict) else None
    if not isinstance(text, str):
        yield "response.reasoning_summary_part.added", {**where, "part": part}
        yield "response.reasoning_summary_part.done", {**where, "part": part}
        return
    yield "response.reasoning_summary_part.added", {**where, "part": {**part, "text": ""}}
    yield _Run("response.reasoning_summary_text.delta", {**where, "delta": _MARK},
               _pieces(text))
    yield "response.reasoning_summary_text.done", {**where, "text": text}
    yield "response.reasoning_summary_part.done", {**where, "part": part}


def _part_events(at: dict[str, Any], sub: int, part: Any) -> Iterator[Event]:
    where = {**at, "content_index": sub}
    kind = part.get("type") if isinstance(part, dict) else None
    name, prefix = PART_TEXT.get(kind or "", ("", ""))
    text = part.get(name) if isinstance(part, dict) and name else None
    if not isinstance(part, dict) or not isinstance(text, str):
        yield "response.content_part.added", {**where, "part": part}
        yield "response.content_part.done", {**where, "part": part}
        return
    empty = {**part, name: ""}
    for key in ("annotations", "logprobs"):
        if isinstance(part.get(key), list):
            empty[key] = []
    yield "response.content_part.added", {**where, "part": empty}
    if kind == "output_text":
        logprobs = part.get("logprobs")
        tokens = _token_logprobs(text, logprobs)
        if tokens is not None:
            for token in tokens:
                yield f"{prefix}.delta", {**where, "delta": token["token"], "logprobs": [token]}
        else:
            yield _Run(f"{prefix}.delta", {**where, "delta": _MARK, "logprobs": []},
                       _pieces(text))
        for n, annotation in enumerate(part.get("annotations") or []):
            yield "response.output_text.annotation.added", {
                **where, "annotation_index": n, "annotation": annotation}
        done_logprobs = logprobs if isinstance(logprobs, list) else []
        yield f"{prefix}.done", {**where, "text": text, "logprobs": done_logprobs}
    else:
        yield _Run(f"{prefix}.delta", {**where, "delta": _MARK}, _pieces(text))
        yield f"{prefix}.done", {**where, name: text}
    yield "response.content_part.done", {**where, "part": part}


def _token_logprobs(text: str, logprobs: Any) -> list[dict[str, Any]] | None:
    """The saved per-token logprobs when they spell out `text` exactly, else None."""
    if not isinstance(logprobs, list) or not logprobs:
        return None
    if not all(isinstance(t, dict) and isinstance(t.get("token"), str) and t["token"]
               for t in logprobs):
        return None
    if "".join(t["token"] for t in logprobs) != text:
        return None
    return logprobs



def stream(selections: Sequence[Selection[Saved]], include_usage: bool) -> bytes:
    """The whole SSE stream of a reply: the recorded frames, or the events of the saved
    body (one whole saved response always answers: a Responses request has no `n`)."""
    exchange = whole(selections)
    assert exchange is not None
    frames = exchange.frames
    return frames if frames is not None else stream_for(orjson.loads(exchange.body))
