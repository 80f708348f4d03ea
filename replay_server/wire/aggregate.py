"""Server-sent events in, one aggregated response body out (what the recorder saves).

`StreamAggregator.feed(bytes)` takes the stream exactly as it arrives, in chunks cut
anywhere; `result()` gives the non-streamed body the same server would have returned:
per choice the content, reasoning, refusal and tool-call deltas concatenated (tool calls
merged by their index), the logprobs lists joined, the last `finish_reason`, and `usage`
from the usage chunk when the client asked for one. It never invents a field the stream
did not carry.

`whole(stream, chat)` is the same for a stream that is all there (a recorded stream, checked
before it is served, which ended cleanly: `data: [DONE]` or every choice finished): the
same body, and StreamError for the same streams, in fewer steps when the stream has the
usual shape (see `_chunks`).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import orjson

_TEXT_FIELDS = ("content", "reasoning", "reasoning_content", "refusal")


class StreamError(Exception):
    """The stream cannot be aggregated: it carried an error or is not a completion stream."""


class StreamAggregator:
    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.done = False
        self._buffer = b""
        self._skip_lf = False
        self._envelope: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None

    def feed(self, data: bytes) -> bool:
        """Take more bytes of the stream; True once `data: [DONE]` has arrived. Raises
        StreamError, and only that, for a stream it cannot aggregate."""
        # every whole event at once (one split, not one copy of the rest per event)
        *events, self._buffer = (self._buffer + self._lines(data)).split(b"\n\n")
        for event in events:
            try:
                self._event(event)
            except StreamError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
                raise StreamError(f"a stream event has an unexpected shape: {e!r}") from None
        return self.done

    def _take(self, payloads: list[bytes]) -> bool:
        """Take the `data` of whole events, in order, as `feed` would (`_event`); False
        (taken in part) at the first doubt. The events that repeat one before them but for
        its text (the usual content deltas: the same bytes around another JSON string) only
        add their texts, which is all that feeding them would do (`_Run`)."""
        at, end, useless = 0, len(payloads), 0
        while at < end:
            try:
                chunk = orjson.loads(payloads[at])
            except orjson.JSONDecodeError:
                return False
            if not isinstance(chunk, dict) or "error" in chunk:
                return False
            try:
                self._chunk(chunk)
            except (TypeError, ValueError, KeyError, AttributeError, IndexError):
                return False
            at += 1
            # a template that no event repeats costs more than it saves: a few at most
            run = _Run.after(self, chunk) if useless < 4 else None
            if run is None:
                continue
            head, tail, first = run.head, run.tail, at
            while at < end and payloads[at].startswith(head) and payloads[at].endswith(tail):
                at += 1
            if not run.close(list(map(itemgetter(slice(len(head), -len(tail))),
                                      payloads[first:at]))):
                return False
            useless += first == at
        return True

    def _lines(self, data: bytes) -> bytes:
        """SSE lines end in CRLF, LF or a lone CR: all become LF. A CR at the end of a
        piece already counts; an LF opening the next piece is then its pair."""
        if self._skip_lf and data.startswith(b"\n"):
            data = data[1:]
        self._skip_lf = data.endswith(b"\r")
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def _event(self, event: bytes) -> None:
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n")
                          if line.startswith(b"data:"))
        if not data:
            return
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise StreamError(f"a stream event is not JSON: {e}") from None
        if not isinstance(chunk, dict) or "error" in chunk:
            raise StreamError(f"the stream carried an error: {data[:200]!r}")
        self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> None:
        for key, value in chunk.items():
            if key not in ("choices", "usage", "object") and value is not None:
                self._envelope[key] = value
            elif key not in ("choices", "usage", "object"):
                self._envelope.setdefault(key, None)
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        for delta in chunk.get("choices") or []:
            index = delta.get("index", 0)
            choice = self._choices.setdefault(index, {"index": index})
            if self.chat:
                _merge_chat(choice, delta)
            else:
                _merge_completion(choice, delta)

    def result(self, ended: bool = False) -> dict[str, Any]:
        """The aggregated body. A stream is whole at `data: [DONE]`, or, when `ended` (its
        body ended cleanly, as some servers end it after the last finish_reason chunk;
        openai-python accepts that), once every choice it carried has its finish_reason."""
        if not (self.done or ended and self._choices and all(
                c.get("finish_reason") is not None for c in self._choices.values())):
            raise StreamError("the stream ended before `data: [DONE]`" + (
                ", with a choice that has no finish_reason" if ended else ""))
        if not all(isinstance(i, int) for i in self._choices):
            raise StreamError("a stream chunk has a choice without an integer index")
        body: dict[str, Any] = {"id": self._envelope.get("id"),
                                "object": "chat.completion" if self.chat else "text_completion"}
        body.update((k, v) for k, v in self._envelope.items() if k != "id")
        body["choices"] = [self._choices[i] for i in sorted(self._choices)]
        body["usage"] = self._usage
        return body


def _merge_chat(choice: dict[str, Any], delta: dict[str, Any]) -> None:
    message = choice.setdefault("message", {"role": "assistant", "content": None})
    for key, value in (delta.get("delta") or {}).items():
        if value is None:
            continue
        if key == "role":
            message["role"] = value
        elif key in _TEXT_FIELDS:
            message[key] = (message.get(key) or "") + value
        elif key == "tool_calls":
            _merge_tool_calls(message.setdefault("tool_calls", []), value)
        elif key == "function_call":
            _merge_function(message.setdefault("function_call", {}), value)
        else:
            message[key] = value
    _merge_common(choice, delta)


def _merge_tool_calls(calls: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    for delta in deltas:
        index = delta.get("index", len(calls))
        while len(calls) <= index:
            calls.append({})
        call = calls[index]
        for key, value in delta.items():
            if key == "index" or value is None:
                continue
            if key == "function":
                _merge_function(call.setdefault("function", {}), value)
            else:
                call[key] = value


def _merge_function(function: dict[str, Any], delta: dict[str, Any]) -> None:
    """Arguments arrive in pieces; the name (and anything else) arrives once."""
    for key, value in delta.items():
        if key == "arguments" and value is not None:
            function[key] = function.get(key, "") + value
        elif value is not None and function.get(key) is None:
            function[key] = value


def _merge_completion(choice: dict[str, Any], delta: dict[str, Any]) -> None:
    choice["text"] = choice.get("text", "") + (delta.get("text") or "")
    _merge_common(choice, delta)


def _merge_common(choice: dict[str, Any], delta: dict[str, Any]) -> None:
    """finish_reason and other per-choice fields: the last non-null value wins; logprob
    lists (chat `content`/`refusal`, completion `tokens`/`token_logprobs`/...) are joined."""
    for key, value in delta.items():
        if key in ("index", "delta", "text", "logprobs"):
            continue
        if value is not None or key not in choice:
            choice[key] = value
    logprobs = delta.get("logprobs")
    merged = choice.get("logprobs")
    if isinstance(logprobs, dict):
        merged = dict(merged or {})
        for key, value in logprobs.items():
            if isinstance(value, list):
                merged[key] = (merged.get(key) or []) + value
            elif merged.get(key) is None:
                merged[key] = value
    choice["logprobs"] = merged


def whole(stream: bytes, chat: bool) -> dict[str, Any]:
    """`StreamAggregator(chat)` fed the whole `stream`: its `result()`, or the StreamError
    it raises (a stream of an unusual shape, or one it refuses, is fed as it is)."""
    payloads = _payloads(stream)
    if payloads is not None:
        aggregator = StreamAggregator(chat)
        try:
            if aggregator._take(payloads):
                aggregator.done = True
                return aggregator.result()
        except StreamError:
            pass
    aggregator = StreamAggregator(chat)
    aggregator.feed(stream)
    return aggregator.result(ended=True)


_DATA, _NEXT, _END = b"data: ", b"\n\ndata: ", b"\n\ndata: [DONE]\n\n"


def _payloads(stream: bytes) -> list[bytes] | None:
    """The `data` of each event of a stream of the usual shape, or None (then `feed`
    decides): every event one `data: ` line ending in LF, `data: [DONE]` last. (CRs,
    other fields, comments, data on several lines are left to `feed`, which reads them as
    the SSE rules say.)"""
    if not stream.startswith(_DATA) or not stream.endswith(_END) or b"\r" in stream:
        return None
    payloads = stream[len(_DATA):-len(_END)].split(_NEXT)
    if stream.count(b"\n") != 2 * len(payloads) + 2:  # a LF in an event: not one line
        return None
    return payloads


_MARK = "\x00\x01replay-text\x01\x00"
_MARK_JSON = orjson.dumps(_MARK)


class _Run:
    """Events that repeat the one before them but for one JSON string (the text of a
    delta), each adding its text to the same place (`into[name]`). The one before was
    taken in full; taking a repeat in full right after it would set each field again to
    what it just was, but for the text, added to: the same holds for its repeats, one after
    another, if its one choice has no logprobs (they would be joined) and its delta no
    other field (chat: a delta of just that text)."""

    def __init__(self, head: bytes, tail: bytes, into: dict[str, Any], name: str) -> None:
        self.head, self.tail, self.into, self.name = head, tail, into, name

    @classmethod
    def after(cls, aggregator: StreamAggregator, chunk: dict[str, Any]) -> _Run | None:
        choices = chunk.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or \
                not isinstance(choices[0], dict) or choices[0].get("logprobs") is not None:
            return None
        part = choices[0]
        place = part.get("delta") if aggregator.chat else part
        if not isinstance(place, dict):
            return None
        name = next(iter(place), "") if aggregator.chat else "text"
        if aggregator.chat and (name not in _TEXT_FIELDS or len(place) != 1):
            return None
        text = place.get(name)
        choice = aggregator._choices.get(part.get("index", 0))
        if not isinstance(text, str) or choice is None:
            return None
        place[name] = _MARK  # the event's bytes as orjson writes them, split at its text
        around = orjson.dumps(chunk).split(_MARK_JSON)
        place[name] = text
        if len(around) != 2:
            return None
        return cls(around[0], around[1], choice["message"] if aggregator.chat else choice,
                   name)

    def close(self, texts: list[bytes]) -> bool:
        """Add the texts (JSON strings); False if one is not one (then the event it came
        from is not the template with another text: `feed` decides)."""
        try:
            decoded = list(map(orjson.loads, texts))
        except orjson.JSONDecodeError:
            return False
        if not set(map(type, decoded)) <= {str}:
            return False
        if decoded:
            self.into[self.name] = (self.into.get(self.name) or "") + "".join(decoded)
        return True
