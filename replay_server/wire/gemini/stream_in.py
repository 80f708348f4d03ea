"""A Gemini stream in (`:streamGenerateContent`), in either framing, as it arrives -> the
response a plain `:generateContent` gets, checked as it is built.

Each chunk is a whole GenerateContentResponse: server-sent events (`alt=sse`: one `data: `
event a chunk, no end marker), or one JSON array of them (without `alt=sse`: `[`, the
chunks joined by commas, `]`), told apart by the stream's first byte. The chunks add up
thus (what Google's non-streamed answer holds):
- candidates by `index` (left out: 0), in index order; a candidate's fields (its
  `finishReason`, safety ratings, ...) as the last chunk that carries each set it;
- a candidate's parts one after the other, the first part of a chunk joined to the part
  before it when both are pieces of one text (a `text`, and nothing but `thought` and
  `thoughtSignature` beside it; the same `thought`; the part before without a signature,
  which comes on the last piece of its part);
- every other field (`usageMetadata`, `modelVersion`, `responseId`, `promptFeedback`) as
  the last chunk that carries it set it (the usage on the last chunk counts everything).
A chunk with an `error` is no answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .. import sse
from ..sse import StreamError
from .answer import CANDIDATES

_TEXT_PIECE = frozenset({"text", "thought", "thoughtSignature"})


def text_piece(part: Any) -> bool:
    """Whether a part is (a piece of) a text, nothing but its thought flag and signature
    beside it."""
    return isinstance(part, dict) and isinstance(part.get("text"), str) \
        and part.keys() <= _TEXT_PIECE


def joins(before: Any, part: Any) -> bool:
    """Whether `part`, first of its chunk, continues the text part `before` it."""
    return text_piece(before) and text_piece(part) and "thoughtSignature" not in before \
        and before.get("thought") == part.get("thought")


class GeminiStreamAggregator:
    """Takes a Gemini stream as it arrives (`feed`, in chunks cut anywhere); `result` is
    the whole response. Raises StreamError, and only that, for a stream that is no answer:
    a chunk that is not a JSON object, or that carries an `error`; a JSON array cut
    short; a stream of no chunk at all."""

    def __init__(self) -> None:
        self._frames = sse.Frames()
        self._array: bytes | None = None  # the JSON array's bytes so far (None: SSE)
        self._started = False
        self.closed = False  # the JSON array's closing bracket has arrived
        self.body: dict[str, Any] = {}
        self.candidates: dict[int, dict[str, Any]] = {}

    def feed(self, data: bytes) -> bool:
        """Take more bytes; True once a JSON array's closing bracket has arrived (server-
        sent events have no end marker: never)."""
        if not self._started:
            head = data.lstrip()
            if not head:
                return False
            self._started = True
            self._array = b"" if head.startswith(b"[") else None
            data = head
        if self._array is None:
            for frame in self._frames.feed(data):
                self._dispatch(frame)
            return False
        if not self.closed:
            self._array += data
            if self._array.rstrip().endswith(b"]"):
                self._read_array(cut_short_ok=True)
        return self.closed

    def finish(self) -> None:
        """The stream has ended: a last event without its blank line is read too."""
        if self._array is None and (rest := self._frames.finish()):
            self._dispatch(rest)

    def _read_array(self, cut_short_ok: bool) -> None:
        assert self._array is not None
        try:
            chunks = orjson.loads(self._array)
        except orjson.JSONDecodeError as e:
            if cut_short_ok:
                return  # (a `]` inside a chunk: more is to come)
            raise StreamError(f"the JSON array stream was cut short or is not JSON: {e}"
                              ) from None
        if not isinstance(chunks, list):
            raise StreamError("the stream is not a JSON array of responses")
        self.closed = True
        for chunk in chunks:
            self._add(chunk)

    def _dispatch(self, frame: bytes) -> None:
        data = sse.data_of(frame)
        if not data:
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise StreamError(f"a stream event is not JSON: {e}") from None
        self._add(chunk)

    def _add(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise StreamError(f"a stream chunk is not a response object: {chunk!r:.200}")
        if "error" in chunk:
            raise StreamError(f"the stream carried an error: "
                              f"{orjson.dumps(chunk['error']).decode()[:300]}")
        for name, value in chunk.items():
            if name != CANDIDATES:
                self.body[name] = value
                continue
            self.body.setdefault(CANDIDATES, None)  # (its place among the fields)
            if not isinstance(value, list):
                raise StreamError("a chunk's `candidates` is not a list")
            for candidate in value:
                self._candidate(candidate)

    def _candidate(self, candidate: Any) -> None:
        index = candidate.get("index", 0) if isinstance(candidate, dict) else None
        if type(index) is not int:
            raise StreamError("a chunk's candidate is not an object with an integer `index`")
        into = self.candidates.setdefault(index, {})
        for name, value in candidate.items():
            if name == "content" and isinstance(value, dict) and isinstance(
                    into.get(name), dict):
                into[name] = _content(into[name], value)
            else:
                into[name] = value

    def result(self, ended: bool = False) -> dict[str, Any]:
        """The whole response (`ended`: the stream's body has ended; a JSON array must
        have closed by then, and was cut short if not)."""
        if self._array is not None and not self.closed and ended:
            self._read_array(cut_short_ok=False)
        if ended:
            self.finish()
        if not self.body:
            raise StreamError("the stream carried no response")
        if self._array is not None and not self.closed:
            raise StreamError("the JSON array stream has not closed")
        body = dict(self.body)
        if CANDIDATES in body:
            body[CANDIDATES] = [self.candidates[i] for i in sorted(self.candidates)]
        return body


def _content(before: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """A candidate's content with a chunk's content added: its parts appended (the first
    joined to the text piece before it: `joins`), its other fields set."""
    out = dict(before)
    for name, value in more.items():
        if name != "parts" or not isinstance(value, list):
            out[name] = value
            continue
        parts = list(out.get("parts") or [])
        for i, part in enumerate(value):
            if i == 0 and parts and joins(parts[-1], part):
                last = parts[-1]
                parts[-1] = {**last, **part, "text": last["text"] + part["text"]}
            else:
                parts.append(part)
        out["parts"] = parts
    return out


def aggregate(stream: bytes | Iterable[bytes]) -> dict[str, Any]:
    """A whole Gemini stream -> its response (StreamError if it is none)."""
    aggregator = GeminiStreamAggregator()
    for chunk in [stream] if isinstance(stream, bytes) else stream:
        aggregator.feed(chunk)
    return aggregator.result(ended=True)
