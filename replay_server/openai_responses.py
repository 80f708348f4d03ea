"""The OpenAI Responses API (`POST /v1/responses`): its stream, its key. Pure functions.

- `ResponsesStreamAggregator` / `aggregate`: a Responses SSE stream, fed as it arrives, ->
  the final response body (the `response` of `response.completed`, checked against the
  deltas), the event payloads and the raw frames (for a byte-faithful replay);
- `events_for`: the SSE frames a server sends for a saved non-streamed response, the text
  and arguments cut into token-sized deltas (`split_deltas`);
- `keyed_input`: the part of a Responses request that belongs in the replay key, with the
  field table `FIELDS` (the same roles as `keys.FIELDS`: key, strict, ignored).

Wire format (openai-python's `types/responses`, vLLM's `entrypoints/openai/responses`):
every event is `event: <type>` + `data: <json>` with a `type` and an increasing
`sequence_number` (from 0); no `data: [DONE]` at the end (one is tolerated). A stream
opens with `response.created` and `response.in_progress` (the response with `status:
"in_progress"`, no output, no usage); each output item is `response.output_item.added`
(`output_index`, the item without its text), its parts and deltas (`item_id`,
`output_index`, `content_index` or `summary_index`), then `response.output_item.done`
(the whole item); the stream ends with `response.completed` (the whole response with
`usage`), or `response.incomplete` / `response.failed` (OpenAI), or an `error` event.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from .keys import IGNORED, KEY, STRICT, Field, drop_nulls, number, verbatim
from .sse import line_end

RESPONSES_PATH = "/v1/responses"

# --------------------------------------------------------------------------- deltas

_PIECE = re.compile(r"\s*(?:\w{1,16}|[^\w\s])")


def split_deltas(text: str) -> list[str]:
    """`text` cut into token-sized pieces that join back to it exactly.

    A piece is a run of up to 16 word characters, or one other non-space character, with
    the whitespace before it; whitespace at the end of the text goes with the last piece.
    So a text of two words or more is never one piece, and an empty text is no piece at
    all. The same rule suits chat/completions streams.
    """
    pieces: list[str] = _PIECE.findall(text)
    used = sum(map(len, pieces))
    if used < len(text):  # only trailing whitespace is left over
        if pieces:
            pieces[-1] += text[used:]
        else:
            pieces = [text]
    return pieces


# --------------------------------------------------------------------------- stream in


class ResponsesStreamError(Exception):
    """The stream cannot be saved as an answer: it failed, carried an error, was cut short,
    or its final response does not match its deltas."""


# Item types whose one string field streams as deltas: (field, delta event prefix).
_STREAMED_FIELD = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
    "mcp_call": ("arguments", "response.mcp_call_arguments"),
}
# Part types of a message or reasoning item: (the part's text field, delta event prefix).
_PART_TEXT = {
    "output_text": ("text", "response.output_text"),
    "refusal": ("refusal", "response.refusal"),
    "reasoning_text": ("text", "response.reasoning_text"),
}
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed",
                       "error"})
_PART_DELTAS = {f"{prefix}.delta": name for name, (_, prefix) in _PART_TEXT.items()}
_FIELD_DELTAS = {f"{prefix}.delta": kind for kind, (_, prefix) in _STREAMED_FIELD.items()}


@dataclass
class Aggregated:
    """A whole stream: the final body, the event payloads and the raw SSE frames (each with
    its blank line; joined they give the stream's bytes back)."""

    response: dict[str, Any]
    events: list[dict[str, Any]]
    frames: list[bytes]


@dataclass
class ResponsesStreamAggregator:
    """Takes a Responses stream as it arrives (`feed`, in chunks cut anywhere) and gives
    the final response body (`result`).

    The final body is `response.completed`'s (or `response.incomplete`'s) `response`; when
    that carries no `output` (OpenAI may leave it out), the `response.output_item.done`
    items in `output_index` order. With `check` (the default) `result` also requires that
    the deltas agree with it: per output item the joined text, refusal, reasoning,
    summary and argument deltas equal the final item's, and the `*.done` events say the
    same. Item ids are not compared: vLLM streams its items under other ids than the final
    body's.
    """

    check: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    terminal: dict[str, Any] | None = None
    _buffer: bytes = b""
    _frame: list[bytes] = field(default_factory=list)
    _data: list[bytes] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.terminal is not None

    def feed(self, data: bytes) -> bool:
        """Take more bytes of the stream; True once a terminal event has arrived
        (`response.completed`, `response.incomplete`, `response.failed` or `error`)."""
        buffer = self._buffer + data
        start = 0
        while True:
            end = line_end(buffer, start)
            if end is None:
                break
            self._line(buffer[start:end])
            start = end
        self._buffer = buffer[start:]
        return self.done

    def finish(self) -> None:
        """The stream has ended: a last event without its blank line is taken as it is."""
        if self._buffer:
            self._line(self._buffer)
            self._buffer = b""
        if self._frame:
            self._dispatch()

    def _line(self, line: bytes) -> None:
        self._frame.append(line)
        text = line.rstrip(b"\r\n")
        if not text:
            self._dispatch()
        elif text.startswith(b"data:"):
            value = text[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)

    def _dispatch(self) -> None:
        frame, data = b"".join(self._frame), b"\n".join(self._data)
        self._frame, self._data = [], []
        self.frames.append(frame)
        if not data or data.strip() == b"[DONE]":
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise ResponsesStreamError(f"a stream event is not JSON: {e}") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ResponsesStreamError(f"a stream event has no type: {data[:200]!r}")
        self.events.append(event)
        if event["type"] in _TERMINAL and self.terminal is None:
            self.terminal = event

    def result(self) -> dict[str, Any]:
        terminal = self.terminal
        if terminal is None:
            raise ResponsesStreamError("the stream ended before `response.completed`")
        if terminal["type"] == "error":
            raise ResponsesStreamError(f"the stream carried an error: {_brief(terminal)}")
        response = terminal.get("response")
        if not isinstance(response, dict):
            raise ResponsesStreamError(f"`{terminal['type']}` carries no response object")
        if terminal["type"] == "response.failed":
            raise ResponsesStreamError(
                f"the response failed: {_brief(response.get('error') or response)}")
        items = _done_items(self.events)
        if response.get("output") is None:
            response = {**response, "output": [items[i] for i in sorted(items)]}
        if self.check:
            problems = check_stream(self.events, response)
            if problems:
                raise ResponsesStreamError("the stream does not match its final response: "
                                           + "; ".join(problems[:5]))
        return response

    def aggregated(self) -> Aggregated:
        return Aggregated(self.result(), self.events, self.frames)


def _brief(value: Any) -> str:
    return orjson.dumps(value).decode()[:300]


def aggregate(stream: bytes | Iterable[bytes], check: bool = True) -> Aggregated:
    """A whole Responses stream (bytes, or chunks of it) -> its final body, events, frames."""
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
    if kind in _STREAMED_FIELD:
        value = item.get(_STREAMED_FIELD[kind][0])
        return value if isinstance(value, str) else None
    parts = item.get("summary" if kind == "summary_text" else "content")
    if not isinstance(parts, list) or sub >= len(parts) or not isinstance(parts[sub], dict):
        return None
    value = parts[sub].get(_PART_TEXT.get(kind, ("text", ""))[0])
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


# --------------------------------------------------------------------------- stream out


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

    A run of deltas of one part is encoded once, as a template split where the sequence
    number and the text go: the bytes are those of encoding each event whole.
    """
    frames: list[bytes] = []
    for event in _sequenced(response, terminal_by_status):
        if isinstance(event, dict):
            frames.append(frame(event))
        else:
            frames.extend(_run_frames(*event))
    return frames


def event_payloads(response: dict[str, Any], *, terminal_by_status: bool = False
                   ) -> list[dict[str, Any]]:
    """The event payloads of `events_for`, in order, sequence numbers set."""
    events: list[dict[str, Any]] = []
    for event in _sequenced(response, terminal_by_status):
        if isinstance(event, dict):
            events.append(event)
        else:
            run, first = event
            events += [{"type": run.kind, "sequence_number": first + n,
                        **{k: (text if v is _MARK else v) for k, v in run.fields.items()}}
                       for n, text in enumerate(run.texts)]
    return events


class _Run(NamedTuple):
    """Delta events of one part that differ only in their text (one per `texts` item):
    `fields` are the event's fields with `_MARK` where the text goes."""

    kind: str
    fields: dict[str, Any]
    texts: list[str]


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
                number += len(step.texts)
            else:
                yield event(*step)
    status = response.get("status")
    last = _TERMINAL_BY_STATUS.get(status, "response.completed") if (
        terminal_by_status and isinstance(status, str)) else "response.completed"
    yield event(last, {"response": response})


def _run_frames(run: _Run, first: int) -> list[bytes]:
    template = frame({"type": run.kind, "sequence_number": _MARK, **run.fields})
    parts = template.split(_MARK_JSON)
    if len(parts) != 3:  # a saved value holds the mark itself (never, in practice)
        return [frame({"type": run.kind, "sequence_number": first + n,
                       **{k: (text if v is _MARK else v) for k, v in run.fields.items()}})
                for n, text in enumerate(run.texts)]
    head, middle, tail = parts
    dumps = orjson.dumps
    return [head + str(first + n).encode() + middle + dumps(text) + tail
            for n, text in enumerate(run.texts)]


def _skeleton(item: dict[str, Any]) -> dict[str, Any]:
    """The item as `output_item.added` shows it: its texts not yet there."""
    streamed = _STREAMED_FIELD.get(item.get("type", ""), ("", ""))[0]
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
    if kind in _STREAMED_FIELD:
        name, prefix = _STREAMED_FIELD[kind]
        value = item.get(name)
        if isinstance(value, str):
            yield _Run(f"{prefix}.delta", {**at, "delta": _MARK}, split_deltas(value))
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
               split_deltas(text))
    yield "response.reasoning_summary_text.done", {**where, "text": text}
    yield "response.reasoning_summary_part.done", {**where, "part": part}


def _part_events(at: dict[str, Any], sub: int, part: Any) -> Iterator[Event]:
    where = {**at, "content_index": sub}
    kind = part.get("type") if isinstance(part, dict) else None
    name, prefix = _PART_TEXT.get(kind or "", ("", ""))
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
                       split_deltas(text))
        for n, annotation in enumerate(part.get("annotations") or []):
            yield "response.output_text.annotation.added", {
                **where, "annotation_index": n, "annotation": annotation}
        done_logprobs = logprobs if isinstance(logprobs, list) else []
        yield f"{prefix}.done", {**where, "text": text, "logprobs": done_logprobs}
    else:
        yield _Run(f"{prefix}.delta", {**where, "delta": _MARK}, split_deltas(text))
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


# --------------------------------------------------------------------------- the key

RESPONSES = "responses"
KEY_VERSION = 1

# How a key field's value is normalised (see `keyed_input`).
INPUT, TOOLS, TEXT, API, VERBATIM_FORM, STRUCTURED = (
    "input", "tools", "text", "api", "verbatim", "structured")


def _f(name: str, role: str, types: str, reason: str, unset: tuple[Any, ...] = (),
       form: str = API) -> Field:
    return Field(name, role, (RESPONSES,), tuple(types.split("|")), reason, unset, form)


FIELDS: tuple[Field, ...] = (
    # --- what the model sees ---
    _f("input", KEY, "string|array", "the conversation the model continues", form=INPUT),
    _f("instructions", KEY, "string", "a system (developer) message put before the input",
       form=VERBATIM_FORM),
    _f("previous_response_id", KEY, "string", "the stored conversation (that request's "
       "input and its response's output) goes before the input: keyed by what it holds, "
       "never by the id (see `keyed_input`)"),
    _f("conversation", KEY, "string|object", "OpenAI: the items of a stored conversation "
       "go before the input; a replay cannot see them, so keyed by the id itself"),
    _f("prompt", KEY, "object", "OpenAI: a stored prompt template and its variables "
       "(vLLM rejects it)"),
    _f("tools", KEY, "array", "tool definitions are rendered into the prompt", unset=([],),
       form=TOOLS),
    _f("reasoning", KEY, "object", "`effort` is rendered into the prompt of reasoning models "
       "(gpt-oss, a chat-template kwarg in vLLM) or sets their budget; `summary` asks for "
       "summary items", unset=({},)),
    _f("truncation", KEY, "string", "`auto` drops the oldest items when the context "
       "overflows", unset=("disabled",)),
    _f("context_management", KEY, "array", "OpenAI: compaction rewrites the conversation the "
       "model sees", unset=([],), form=VERBATIM_FORM),
    _f("image", KEY, "object", "OpenAI: how images are compressed into the prompt"),
    _f("previous_input_messages", KEY, "array", "vLLM: the earlier conversation (Harmony "
       "messages) put before the input", form=VERBATIM_FORM),
    _f("previous_response", KEY, "object", "vLLM: a whole earlier response whose "
       "conversation goes before the input (stateless multi-turn)"),
    _f("mm_processor_kwargs", KEY, "object", "vLLM: how images or audio become prompt "
       "tokens", unset=({},), form=VERBATIM_FORM),
    # --- what the model may emit ---
    _f("tool_choice", KEY, "string|object", "forces, forbids or allows a tool call "
       "(dropped when no tools are given)"),
    _f("parallel_tool_calls", KEY, "boolean", "whether several tool calls may be emitted "
       "(dropped when no tools are given; true is the default)", unset=(True,)),
    _f("text", KEY, "object", "`format` constrains the answer to JSON or a schema "
       "(`{type: text}` is the default); `verbosity` tells how long to answer",
       unset=({},), form=TEXT),
    _f("structured_outputs", KEY, "object", "vLLM: constrains the answer to a schema, "
       "regex, choice or grammar", unset=({},), form=STRUCTURED),
    _f("logit_bias", KEY, "object", "vLLM: bans or favours tokens", unset=({},)),
    _f("moderation", KEY, "object", "OpenAI: a blocking policy replaces flagged answers"),
    _f("access_programs", KEY, "object", "OpenAI: which policy program answers"),
    # --- what the server returns for the same generation ---
    _f("include_stop_str_in_output", KEY, "boolean", "vLLM: the stop string is kept in the "
       "returned text", unset=(False,)),
    _f("skip_special_tokens", KEY, "boolean", "vLLM: special tokens are left out of the "
       "returned text", unset=(True,)),
    # --- how the model samples, where it stops, what else is returned: --strict ---
    _f("temperature", STRICT, "number", "sampling temperature"),
    _f("top_p", STRICT, "number", "nucleus sampling"),
    _f("top_k", STRICT, "integer", "vLLM: top-k sampling"),
    _f("seed", STRICT, "integer", "vLLM: the sampler's seed"),
    _f("stop", STRICT, "string|array", "vLLM: strings that end the answer"),
    _f("repetition_penalty", STRICT, "number", "vLLM: penalises repeated tokens"),
    _f("ignore_eos", STRICT, "boolean", "vLLM: keep going past the end-of-text token"),
    _f("max_output_tokens", STRICT, "integer", "where the answer is cut (reasoning "
       "included)"),
    _f("max_tool_calls", STRICT, "integer", "OpenAI: how many built-in tool calls are "
       "carried out"),
    _f("top_logprobs", STRICT, "integer", "how many alternatives each logprob lists"),
    _f("include", STRICT, "array", "extra data returned with the same generation "
       "(`message.output_text.logprobs`, `reasoning.encrypted_content`, ...)", unset=([],)),
    _f("vllm_xargs", STRICT, "object", "vLLM: arguments for sampling plugins"),
    _f("enable_response_messages", STRICT, "boolean", "vLLM: the raw prompt and output "
       "messages are returned too"),
    # --- transport and bookkeeping ---
    _f("model", IGNORED, "string", "selects the saved run (see --model-alias)"),
    _f("stream", IGNORED, "boolean", "transport: the same answer, streamed"),
    _f("stream_options", IGNORED, "object", "transport: stream obfuscation"),
    _f("background", IGNORED, "boolean", "transport: the same answer, fetched later with "
       "GET /v1/responses/{id}"),
    _f("background_options", IGNORED, "object", "OpenAI: how soon a background answer is "
       "due"),
    _f("store", IGNORED, "boolean", "bookkeeping: whether the server keeps the response "
       "for GET and previous_response_id"),
    _f("metadata", IGNORED, "object", "bookkeeping: tags stored with the response"),
    _f("user", IGNORED, "string", "bookkeeping: the end user's id"),
    _f("safety_identifier", IGNORED, "string", "bookkeeping: the end user's id"),
    _f("prompt_cache_key", IGNORED, "string", "transport: the provider's cache"),
    _f("prompt_cache_retention", IGNORED, "string", "transport: the provider's cache"),
    _f("prompt_cache_options", IGNORED, "object", "transport: the provider's cache"),
    _f("service_tier", IGNORED, "string", "transport: the provider's queue"),
    _f("request_id", IGNORED, "string", "vLLM: the response id to use"),
    _f("priority", IGNORED, "integer", "vLLM: scheduling priority"),
    _f("cache_salt", IGNORED, "string", "vLLM: prefix-cache isolation"),
    _f("kv_transfer_params", IGNORED, "object", "vLLM: disaggregated serving"),
)

FIELDS_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
_KEYED = {f.name: f for f in FIELDS if f.role == KEY
          and f.name not in ("input", "previous_response_id")}
_NOT_STRICT = frozenset(f.name for f in FIELDS if f.role != STRICT)
_NEEDS_TOOLS = ("tool_choice", "parallel_tool_calls")


class NeedsPrevious(ValueError):
    """The request continues a stored response (`previous_response_id`), and the caller
    did not say what that response's conversation was."""


def _content(content: Any) -> Any:
    """A message content; a list holding one text part (input or output text, no
    annotations or logprobs) is the same as its plain string."""
    if not isinstance(content, list):
        return content
    parts = [_part(p) for p in content]
    if (len(parts) == 1 and isinstance(parts[0], dict)
            and parts[0].get("type") in ("input_text", "output_text")
            and parts[0].keys() == {"type", "text"} and isinstance(parts[0]["text"], str)):
        return parts[0]["text"]
    return parts


def _part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out = drop_nulls(part)
    if part.get("type") == "output_text":
        out = {k: v for k, v in out.items() if not (k in ("annotations", "logprobs")
                                                    and v == [])}
    return out


def input_items(value: Any) -> Any:
    """The request's `input` as a normalised item list (see `keyed_input`)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        return value
    return [_item(i) for i in value]


def _item(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    out = drop_nulls(item)
    if "type" not in out and "role" in out:
        out = {**out, "type": "message"}
    if out.get("type") == "message" and "content" in out:
        out = {**out, "content": _content(out["content"])}
    return out


def output_items(response: dict[str, Any]) -> list[Any]:
    """A response's output as a later turn's prompt holds it: normalised like input items,
    item `id`s left out (the model never sees them, and a replay may have answered the
    earlier turn with another instance's identical generation under other ids)."""
    out = []
    for item in response.get("output") or []:
        normal = _item(item)
        if isinstance(normal, dict):
            normal = {k: v for k, v in normal.items() if k != "id"}
        out.append(normal)
    return out


def previous_of(keyed: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """What `previous_response_id` pointing at `response` puts before a request's input:
    `keyed` (the `keyed_input` of the request that `response` answered, its own previous
    turns included) and the response's `output_items`. Instructions of that earlier
    request are kept although OpenAI does not carry them over: a different earlier turn
    is never the same conversation."""
    return {"request": keyed, "output": output_items(response)}


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    out = []
    for tool in tools:
        if isinstance(tool, dict):
            tool = {k: v for k, v in tool.items() if v is not None}
            if "parameters" in tool:
                tool["parameters"] = verbatim(tool["parameters"])
        out.append(tool)
    return out


def _text(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {k: v for k, v in value.items() if v is not None}
    fmt = out.get("format")
    if fmt == {"type": "text"}:
        del out["format"]
    elif isinstance(fmt, dict):
        fmt = {k: v for k, v in fmt.items() if v is not None}
        if "schema" in fmt:
            fmt["schema"] = verbatim(fmt["schema"])
        out["format"] = fmt
    return out


def _structured(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: verbatim(v) for k, v in value.items() if v is not None}


_FORMS: dict[str, Any] = {
    API: drop_nulls,
    TOOLS: _tools,
    TEXT: _text,
    VERBATIM_FORM: verbatim,
    STRUCTURED: _structured,
}


def keyed_input(request: dict[str, Any], previous: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """The keyed part of a Responses request, normalised.

    `{"v", "kind": "responses", "input": [items], "previous"?: {...}, <key fields>}` with
    the *key* fields of `FIELDS` the request sets. `previous` is required when the request
    has a `previous_response_id` (else `NeedsPrevious`): `previous_of(<keyed_input of the
    request that the id's response answered>, <that response>)`. The id itself is never
    keyed: it names what a server stored, and a replay serving an identical generation of
    another instance hands out another id for the same conversation.

    Normalised, and only this, each because the two forms are the same to the model:
    1. a string `input` is a list of one user message item holding that string: OpenAI
       documents a string input as a user text input, and vLLM turns both into the same
       `{"role": "user", "content": ...}` chat message;
    2. a message item without `type` has `"type": "message"` (the API's only value for it);
    3. a message `content` that is a list of one `input_text`/`output_text` part (with no
       annotations or logprobs) is that part's string, as `keys` does for chat text parts;
       `annotations: []` and `logprobs: []` on an `output_text` part (what clients echo
       back from an earlier response) mean none;
    4. null-valued fields of items, parts and API objects (vLLM's bodies, and clients
       echoing them, carry many nulls); never inside a verbatim value (a tool's
       `parameters`, a `text.format` schema, `structured_outputs`), whose key order is
       kept too, as in `keys`;
    5. a field set to the value that means "unset": `tools: []`, `text: {format: {type:
       text}}`, `reasoning: {}`, `truncation: "disabled"`, `parallel_tool_calls: true`;
       and `tool_choice` and `parallel_tool_calls` when no tools are given.
    Not normalised: item `id`s and `status`es in the input (vLLM continues an assistant
    message whose `status` is `in_progress`), `call_id`s (some chat templates render them),
    `instructions` vs a leading system/developer message (rendered differently by OpenAI),
    `input_text` vs `output_text` parts of more than one, and any text.
    """
    keyed: dict[str, Any] = {"v": KEY_VERSION, "kind": RESPONSES,
                             "input": input_items(request.get("input"))}
    if request.get("previous_response_id") is not None:
        if previous is None:
            raise NeedsPrevious("the request continues response "
                                f"{request['previous_response_id']!r}: its conversation is "
                                "needed for the key")
        keyed["previous"] = previous
    for name in request.keys() & _KEYED.keys():
        value = request[name]
        spec = _KEYED[name]
        if value is None:
            continue
        if value in spec.unset:
            continue
        value = _FORMS[spec.form](value)
        if value in spec.unset:
            continue
        keyed[name] = value
    if "tools" not in keyed:
        for name in _NEEDS_TOOLS:
            keyed.pop(name, None)
    return keyed


def sampling_params(request: dict[str, Any]) -> dict[str, Any]:
    """What `--strict` compares: every field the request sets (null, or its "unset" value
    such as `include: []`, means unset) that is neither keyed nor ignored, numbers
    normalised; fields the table does not know too."""
    return {k: number(v) for k, v in request.items()
            if k not in _NOT_STRICT and v is not None
            and not (k in FIELDS_BY_NAME and v in FIELDS_BY_NAME[k].unset)}


def markdown_table() -> str:
    """The README's table of Responses request fields, generated from FIELDS (and tested)."""
    rows = ["| field | role | why |", "| --- | --- | --- |"]
    rows += [f"| `{f.name}` | {f.role} | {f.reason}"
             + (f" (unset: `{orjson.dumps(f.unset[0]).decode()}`)" if f.unset else "") + " |"
             for f in FIELDS]
    return "\n".join(rows)
