"""The stream makers as they were before they were made faster (issue 15): the tests
compare the new ones with these byte for byte. A copy, not to be edited (but for names
that clash): streams.py, sse.fill/escaped and openai_responses/stream_out.py of a942894."""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import re
from collections.abc import Hashable, Iterator
from typing import Any, NamedTuple

import orjson

from replay_server.wire import replies
from replay_server.index.index import Exchange, Selection
from replay_server.wire.responses.stream_in import PART_TEXT, STREAMED_FIELD
from replay_server.paths import RESPONSES_PATH
from replay_server.paths import CHAT_PATH
from replay_server.wire.sse import Frames

# ---- sse.py

_MARKER = "\x00"
_ESCAPED_MARKER = b"\\u0000"  # how orjson writes it inside a JSON string


def fill(head: bytes, tail: bytes, text: str, pieces: re.Pattern[str]) -> bytes:
    """`head + json(piece) + tail` for each piece of `text` (what `pieces` finds in it,
    whitespace left over at the end joining the last piece), joined: the frames of a run
    of deltas that differ only in their text. The pieces are joined with a marker, the
    whole escaped once, and the frame boundaries put at the marks: a few passes over the
    text, not one encoding per piece. (A text holding the marker goes piece by piece.)"""
    if not text:
        return b""
    if _MARKER in text or "\\u0000" in text:
        return b"".join([head + orjson.dumps(p) + tail for p in _split(text, pieces)])
    found: list[str] = pieces.findall(text)
    marked = _MARKER.join(found)
    escaped = orjson.dumps(marked + text[len(marked) - len(found) + 1:] if found else text)
    return head + escaped.replace(_ESCAPED_MARKER, b'"' + tail + head + b'"') + tail


def escaped(texts: list[str]) -> list[bytes]:
    """Each text as orjson escapes it inside a JSON string (without the quotes): joined
    with a marker, escaped once, and cut at the marks, not one encoding per text."""
    joined = _MARKER.join(texts)
    if len(texts) < 2 or "\\u0000" in joined or joined.count(_MARKER) != len(texts) - 1:
        return [orjson.dumps(t)[1:-1] for t in texts]
    return orjson.dumps(joined)[1:-1].split(_ESCAPED_MARKER)


def _split(text: str, pieces: re.Pattern[str]) -> list[str]:
    found: list[str] = pieces.findall(text)
    used = sum(map(len, found))
    if used < len(text):
        if found:
            found[-1] += text[used:]
        else:
            found = [text]
    return found


# ---- openai_responses/stream_out.py

PIECE = re.compile(r"\s*(?:\w{1,16}|[^\w\s])")


def first_piece(text: str) -> str:
    """`split_deltas(text)[0]` ("" for an empty text), without cutting the rest."""
    found = PIECE.match(text)
    if found is None or PIECE.search(text, found.end()) is None:
        return text  # no piece (an empty or blank text), or one: it is the whole text
    return found.group(0)


def split_deltas(text: str) -> list[str]:
    """`text` cut into token-sized pieces that join back to it exactly.

    A piece is a run of up to 16 word characters, or one other non-space character, with
    the whitespace before it; whitespace at the end of the text goes with the last piece.
    So a text of two words or more is never one piece, and an empty text is no piece at
    all. The same rule suits chat/completions streams.
    """
    pieces: list[str] = PIECE.findall(text)
    used = sum(map(len, pieces))
    if used < len(text):  # only trailing whitespace is left over
        if pieces:
            pieces[-1] += text[used:]
        else:
            pieces = [text]
    return pieces




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
                        **{k: (text if v is _R_MARK else v) for k, v in run.fields.items()}}
                       for n, text in enumerate(run.texts)]
    return events


class _RRun(NamedTuple):
    """Delta events of one part that differ only in their text (one per `texts` item):
    `fields` are the event's fields with `_R_MARK` where the text goes."""

    kind: str
    fields: dict[str, Any]
    texts: list[str]


_R_MARK = "\x00\x01replay-mark\x01\x00"  # stands for a value in a template
_R_MARK_JSON = orjson.dumps(_R_MARK)


def _sequenced(response: dict[str, Any], terminal_by_status: bool
               ) -> Iterator[dict[str, Any] | tuple[_RRun, int]]:
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
            if isinstance(step, _RRun):
                yield step, number
                number += len(step.texts)
            else:
                yield event(*step)
    status = response.get("status")
    last = _TERMINAL_BY_STATUS.get(status, "response.completed") if (
        terminal_by_status and isinstance(status, str)) else "response.completed"
    yield event(last, {"response": response})


def _run_frames(run: _RRun, first: int) -> list[bytes]:
    template = frame({"type": run.kind, "sequence_number": _R_MARK, **run.fields})
    parts = template.split(_R_MARK_JSON)
    if len(parts) != 3:  # a saved value holds the mark itself (never, in practice)
        return [frame({"type": run.kind, "sequence_number": first + n,
                       **{k: (text if v is _R_MARK else v) for k, v in run.fields.items()}})
                for n, text in enumerate(run.texts)]
    head, middle, tail = parts
    middle, tail = middle + b'"', b'"' + tail  # the quotes of the text
    return [b"%s%d%s%s%s" % (head, first + n, middle, text, tail)
            for n, text in enumerate(escaped(run.texts))]


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


Event = tuple[str, dict[str, Any]] | _RRun


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
            yield _RRun(f"{prefix}.delta", {**at, "delta": _R_MARK}, split_deltas(value))
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
    yield _RRun("response.reasoning_summary_text.delta", {**where, "delta": _R_MARK},
               split_deltas(text))
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
            yield _RRun(f"{prefix}.delta", {**where, "delta": _R_MARK, "logprobs": []},
                       split_deltas(text))
        for n, annotation in enumerate(part.get("annotations") or []):
            yield "response.output_text.annotation.added", {
                **where, "annotation_index": n, "annotation": annotation}
        done_logprobs = logprobs if isinstance(logprobs, list) else []
        yield f"{prefix}.done", {**where, "text": text, "logprobs": done_logprobs}
    else:
        yield _RRun(f"{prefix}.delta", {**where, "delta": _R_MARK}, split_deltas(text))
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


# ---- streams.py

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


def recorded(selections: list[Selection]) -> Exchange | None:
    """The exchange whose recorded frames `stream` sends for these selections, if any."""
    whole = _whole(selections)
    return whole if whole is not None and whole.stream is not None else None


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
    return b"".join(chunks(endpoint, replies.body(selections), include_usage))


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
    usage = _frame({**_envelope(endpoint, saved), "choices": [], "usage": saved.get("usage")})
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
    """SSE frames for a chat or completions body, framed like vLLM/OpenAI, in small deltas.

    Chat, per choice: a role chunk, reasoning deltas, content deltas (with their
    logprobs), refusal, tool-call deltas (the call, then its arguments piece by piece),
    then a chunk with `finish_reason`; completions, per choice: the text piece by piece,
    then the finish. With `include_usage`, a last chunk with no choices carries `usage`;
    then `[DONE]`.
    """
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
            yield _frame({**envelope, "choices": [part]})
        finish = {"index": index, **blank, "logprobs": None,
                  "finish_reason": choice.get("finish_reason")}
        if "stop_reason" in choice:
            finish["stop_reason"] = choice["stop_reason"]
        yield _frame({**envelope, "choices": [finish]})
    if include_usage:
        yield _frame({**envelope, "choices": [], "usage": response.get("usage")})
    yield DONE


def _run(envelope: dict[str, Any], index: int, run: Run) -> bytes:
    """The frames of a run of deltas: the frame encoded once, split where the text goes,
    and the pieces put in (exactly what encoding each frame whole gives)."""
    part = {"index": index, "logprobs": None, **run.marked, "finish_reason": None}
    around = _frame({**envelope, "choices": [part]}).split(_MARK_JSON)
    if len(around) == 2:
        return fill(around[0], around[1], run.text, PIECE)
    # a saved field holds the mark itself (never, in practice): encode each frame whole
    marked = orjson.dumps(run.marked)
    return b"".join(_frame({**envelope, "choices": [{
        "index": index, "logprobs": None,
        **orjson.loads(marked.replace(_MARK_JSON, orjson.dumps(text))), "finish_reason": None}]})
        for text in split_deltas(run.text))
