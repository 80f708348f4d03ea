"""A chat or completions stream in -> the one response body the same server would have
returned non-streamed (what the recorder saves, and what a recorded stream is checked
against before it is served)."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import orjson

from .. import sse
from ..sse import StreamError

_NOT_ENVELOPE = ("choices", "usage", "object")
_OWN = frozenset({"index", "delta", "text", "logprobs"})  # what the merges themselves take
_MARK = "\x00\x01replay-text\x01\x00"  # stands for a delta's text in a repeat's template
_MARK_JSON = orjson.dumps(_MARK)


class Choice:
    """One choice being aggregated: `body` is the choice as the result shows it; the texts
    that arrive in pieces gather in lists (`add`) and are joined once, at the end."""

    __slots__ = ("body", "_pieces", "_slots")

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self._pieces: list[tuple[dict[str, Any], str, list[str]]] = []
        self._slots: dict[tuple[int, str], list[str]] = {}

    def add(self, into: dict[str, Any], name: str, piece: Any) -> None:
        """Add a piece of text to `into[name]` (which keeps its place among the fields)."""
        if piece.__class__ is not str:
            raise StreamError(f"a stream delta's `{name}` is not a string: {piece!r:.60}")
        slot = self._slots.get((id(into), name))
        if slot is None:
            before = into.get(name)
            slot = self._slots[(id(into), name)] = [before] if isinstance(before, str) else []
            self._pieces.append((into, name, slot))
            into[name] = ""
        slot.append(piece)

    def pieces(self, into: dict[str, Any], name: str) -> list[str]:
        """The pieces `add` gathered for `into[name]`."""
        return self._slots[(id(into), name)]

    def finished(self) -> dict[str, Any]:
        for into, name, pieces in self._pieces:
            into[name] = "".join(pieces)
        return self.body

    def common(self, delta: dict[str, Any]) -> None:
        """finish_reason and other per-choice fields: the last non-null value wins; logprob
        lists (chat `content`/`refusal`, completion `tokens`/`token_logprobs`/...) are
        joined."""
        body = self.body
        for key, value in delta.items():
            if key not in _OWN and (value is not None or key not in body):
                body[key] = value
        logprobs = delta.get("logprobs")
        if logprobs.__class__ is not dict:
            body.setdefault("logprobs", None)
            return
        merged = body.get("logprobs")
        if merged is None:
            merged = body["logprobs"] = {}
        for key, value in logprobs.items():
            if value.__class__ is list:
                have = merged.get(key)
                if have.__class__ is list:
                    have.extend(value)
                else:
                    merged[key] = list(value)
            elif merged.get(key) is None:
                merged[key] = value


Merge = Callable[[Choice, dict[str, Any]], None]
# Where the one text of a delta is that adds nothing else (the object holding it in the
# chunk, its field, the pieces it goes to), or None (`chat.stream_in.repeat`, ...).
Repeat = Callable[[Choice, dict[str, Any]], "tuple[dict[str, Any], str, list[str]] | None"]


class _Template:
    """A chunk's frame as orjson writes it, split where its one delta text goes: a later
    frame that is these bytes around another JSON string is the same chunk with another
    text (and nothing but that text to add)."""

    __slots__ = ("head", "tail", "pieces", "used")

    def __init__(self, head: bytes, tail: bytes, pieces: list[str]) -> None:
        self.head, self.tail, self.pieces, self.used = head, tail, pieces, False

    def take(self, frames: list[bytes], start: int) -> int:
        """Add the texts of the repeats from `frames[start]` on, all or none; where the
        first frame not taken is."""
        head, tail, end = self.head, self.tail, start
        while end < len(frames) and frames[end].startswith(head) and \
                frames[end].endswith(tail):
            end += 1
        if end == start:
            return start
        middles = list(map(itemgetter(slice(len(head), -len(tail))), frames[start:end]))
        if any(b"\n" in m or b"\r" in m for m in middles):
            return start  # a line break ends the event's data line: each is read in full
        try:
            texts = list(map(orjson.loads, middles))
        except orjson.JSONDecodeError:
            return start  # not each a JSON string: each is taken in full (and refused)
        if not set(map(type, texts)) <= {str}:
            return start
        self.pieces += texts
        self.used = True
        return end


class ChoicesAggregator:
    """Takes a chat or completions stream exactly as it arrives (`feed`, in chunks cut
    anywhere) and gives the non-streamed body the same server would have returned
    (`result`): per choice the content, reasoning, refusal and tool-call deltas
    concatenated (tool calls merged by their index), the logprob lists joined, the last
    `finish_reason`, and `usage` from the usage chunk when the client asked for one. It
    never invents a field the stream did not carry.

    There is one aggregator for a stream as it arrives (the recorder) and for a stream that
    is all there (a recorded stream, checked when its saved record is loaded), so a stream
    is read one way only: cut into frames by the SSE rules (`sse.Frames`), and each
    frame's data merged into its choice (`merge`, the family's).

    Most of a stream is deltas that repeat the chunk before them but for their text (the
    same id, model, index, nulls): merging such a repeat sets every field again to what it
    already is and adds its text, nothing else. So after a chunk whose one choice adds one
    text and nothing that would be joined (no logprobs, no tool call: the family's
    `repeat` says), its bytes as orjson writes them become a template, and an event that
    is the template around another JSON string adds that string, unparsed otherwise; any
    other event is parsed and merged in full. (A template no event repeats is dropped, and
    after a few such the stream's chunks are not templated.) Texts are joined once at the
    end rather than once per delta: a reasoning trace of thousands of deltas would
    otherwise be copied over and over.
    """

    def __init__(self, body_object: str, merge: Merge, repeat: Repeat,
                 choice: Callable[[int], dict[str, Any]]) -> None:
        self.done = False
        self._object, self._merge, self._repeat, self._new = body_object, merge, repeat, choice
        self._frames = sse.Frames()
        self._envelope: dict[str, Any] = {}
        self._choices: dict[Any, Choice] = {}
        self._usage: Any = None
        self._template: _Template | None = None
        self._unused = 0  # templates that no event repeated

    def feed(self, data: bytes) -> bool:
        """Take more bytes of the stream; True once `data: [DONE]` has arrived. Raises
        StreamError, and only that, for a stream it cannot aggregate."""
        frames = self._frames.feed(data)
        at = 0
        try:
            while at < len(frames):
                if self._template is not None:
                    at = self._template.take(frames, at)
                    if at == len(frames):
                        break
                frame = frames[at]
                at += 1
                payload = sse.data_of(frame)
                if payload:
                    self._event(frame, payload)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            raise StreamError(f"a stream event has an unexpected shape: {e!r}") from None
        return self.done

    def _event(self, frame: bytes, payload: bytes) -> None:
        if sse.is_done(payload):
            self.done = True
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            raise StreamError(f"a stream event is not JSON: {e}") from None
        if chunk.__class__ is not dict or "error" in chunk:
            raise StreamError(f"the stream carried an error: {payload[:200]!r}")
        envelope = self._envelope
        for key, value in chunk.items():
            if key in _NOT_ENVELOPE:
                continue
            if value is not None:
                envelope[key] = value
            elif key not in envelope:
                envelope[key] = None
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = usage
        choices = chunk.get("choices") or ()
        for delta in choices:
            index = delta.get("index", 0)
            choice = self._choices.get(index)
            if choice is None:
                choice = self._choices[index] = Choice(self._new(index))
            self._merge(choice, delta)
        self._templated(frame, payload, chunk, choices)

    def _templated(self, frame: bytes, payload: bytes, chunk: dict[str, Any], choices: Any
                   ) -> None:
        """The template the chunk just merged makes, if it makes one (see the class): a
        frame of one data line, as orjson writes its chunk."""
        if self._template is not None and not self._template.used:
            self._unused += 1
        self._template = None
        if self._unused >= 4 or choices.__class__ is not list or len(choices) != 1 \
                or frame != b"data: " + payload + b"\n\n":
            return
        repeat = self._repeat(self._choices[choices[0].get("index", 0)], choices[0])
        if repeat is None:
            return
        place, name, pieces = repeat
        text, place[name] = place[name], _MARK
        around = orjson.dumps(chunk).split(_MARK_JSON)
        place[name] = text
        if len(around) == 2:
            self._template = _Template(b"data: " + around[0], around[1] + b"\n\n", pieces)

    def result(self, ended: bool = False) -> dict[str, Any]:
        """The aggregated body. A stream is whole at `data: [DONE]`, or, when `ended` (its
        body ended cleanly, as some servers end it after the last finish_reason chunk;
        openai-python accepts that), once every choice it carried has its finish_reason."""
        if not (self.done or ended and self._choices and all(
                c.body.get("finish_reason") is not None for c in self._choices.values())):
            raise StreamError("the stream ended before `data: [DONE]`" + (
                ", with a choice that has no finish_reason" if ended else ""))
        if not all(isinstance(i, int) for i in self._choices):
            raise StreamError("a stream chunk has a choice without an integer index")
        body: dict[str, Any] = {"id": self._envelope.get("id"), "object": self._object}
        body.update((k, v) for k, v in self._envelope.items() if k != "id")
        body["choices"] = [self._choices[i].finished() for i in sorted(self._choices)]
        body["usage"] = self._usage
        return body


def aggregate(aggregator: ChoicesAggregator, stream: bytes) -> dict[str, Any]:
    """A whole stream's body (StreamError if it has none): all of it has arrived."""
    aggregator.feed(stream)
    return aggregator.result(ended=True)


def is_usage_chunk(frame: bytes) -> bool:
    """Whether a frame is the usage chunk that `stream_options.include_usage` asks for: a
    chunk with no choices and a usage (a usage riding on a chunk with choices, as with
    vLLM's `continuous_usage_stats`, is not it: the chunk is still there without it)."""
    if b'"usage"' not in frame:  # (no JSON writer escapes the letters of a key)
        return False
    data = sse.data_of(frame)
    if data is None:
        return False
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(chunk, dict) and chunk.get("choices") == [] and \
        chunk.get("usage") is not None


def carries_usage(frames: list[str]) -> bool:
    """Whether a recorded stream carried the usage chunk (the client asked for
    `stream_options.include_usage`)."""
    return any(is_usage_chunk(f.encode()) for f in reversed(frames) if '"usage"' in f)


def unfinished(body: dict[str, Any], asked: int) -> str | None:
    """Why the body of a stream that ended cleanly before `data: [DONE]` is not the whole
    answer, or None: it lacks some of the `asked` choices (each that came has its
    finish_reason: `ChoicesAggregator.result`)."""
    if len(body["choices"]) != asked:
        return ("the stream ended before `data: [DONE]`, without every choice the request "
                "asked for")
    return None
