"""Server-sent events in, one aggregated response body out (what the recorder saves).

`StreamAggregator.feed(bytes)` takes the stream exactly as it arrives, in chunks cut
anywhere; `result()` gives the non-streamed body the same server would have returned:
per choice the content, reasoning, refusal and tool-call deltas concatenated (tool calls
merged by their index), the logprobs lists joined, the last `finish_reason`, and `usage`
from the usage chunk when the client asked for one. It never invents a field the stream
did not carry.
"""

from __future__ import annotations

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

    def result(self) -> dict[str, Any]:
        if not self.done:
            raise StreamError("the stream ended before `data: [DONE]`")
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
