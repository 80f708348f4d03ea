"""Saved chat or completions answers -> SSE streams, framed like vLLM/OpenAI. No HTTP.

- A recorded stream is sent again as the frames the upstream sent, byte for byte: the same
  deltas in the same order; when the request's `stream_options.include_usage` differs from
  the recording's, its usage chunks are dropped, or one is added right before the
  `data: [DONE]` frame (the saved usage, which is null then). The frames are found by the
  SSE rules (`sse.Frames`), so a text that holds `[DONE]` or `"usage"` is only text.
- Any other answer (an import, a non-streamed recording, an answer assembled from several
  samples) is streamed in small deltas, never as one: per choice, the family's deltas
  (`ChoicesStream.deltas`: `pieces.split_deltas` pieces of each text, or one delta per
  token where saved logprobs spell out the text), then a chunk with `finish_reason`; with
  `include_usage` a last chunk with no choices carries `usage`; then `data: [DONE]`.

A stream of small deltas is hundreds of frames that differ only in their text: each kind
of frame is encoded once as a template (the JSON before and after the text), and a run of
deltas costs a few passes over its text (`pieces.joined_deltas` cuts it, `sse.fill`
escapes it once and puts the frames in), not one dictionary and one encoding per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple

import orjson

from .. import sse
from ..pieces import joined_deltas, split_deltas
from ..selection import Saved, Selection, whole
from . import reply
from .stream_in import is_usage_chunk

DONE = b"data: [DONE]\n\n"
_ENVELOPE = ("created", "model", "system_fingerprint")
MARK = "\x00\x01replay-delta\x01\x00"
"""Stands for the text of a delta in a template; no saved text holds it."""
_MARK_JSON = orjson.dumps(MARK)


class Run(NamedTuple):
    """Deltas that differ only in their text, one per piece of `text` (`split_deltas`):
    `marked` is the delta with `MARK` where the text goes (`shape` names the kind)."""

    shape: Hashable
    marked: dict[str, Any]
    text: str


Delta = dict[str, Any] | Run


def frame(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@dataclass(frozen=True)
class ChoicesStream:
    """How a choices-based family streams: its chunks' `object`, the deltas of one saved
    choice, and the delta that goes with the finish reason."""

    chunk_object: str
    deltas: Callable[[dict[str, Any]], Iterator[Delta]]
    finish: dict[str, Any]

    def stream(self, selections: Sequence[Selection[Saved]], include_usage: bool) -> bytes:
        """The whole SSE stream for a request: the recorded frames when one recorded
        stream answers it whole, else frames made from the body in small deltas."""
        exchange = whole(selections)
        if exchange is not None and exchange.stream is not None:
            frames = exchange.frames
            assert frames is not None
            if exchange.stream[2] == include_usage:
                return frames
            return self._with_usage(frames, exchange, include_usage)
        return b"".join(chain.from_iterable(self._parts(reply.body(selections),
                                                        include_usage)))

    def _with_usage(self, frames: bytes, exchange: Saved, include_usage: bool) -> bytes:
        """Recorded frames, with their usage chunks dropped (not asked for) or one added
        right before the last `[DONE]` frame (asked for, but the recording had none: the
        saved usage, null)."""
        cut = sse.spans(frames)
        if not cut or cut[-1][1] < len(frames):
            cut.append((cut[-1][1] if cut else 0, len(frames)))  # a last frame left open
        if not include_usage:  # (a frame is looked at when it holds what could make it one)
            drop = [(a, b) for a, b in cut if frames.find(b'"usage"', a, b) != -1
                    and is_usage_chunk(frames[a:b])]
            ends = [0] + [i for span in drop for i in span] + [len(frames)]
            return b"".join(frames[ends[i]:ends[i + 1]] for i in range(0, len(ends), 2))
        at = next((a for a, b in reversed(cut) if frames.find(b"[DONE]", a, b) != -1
                   and _is_done(frames[a:b])), len(frames))
        saved = orjson.loads(exchange.body)
        usage = frame({**self._envelope(saved), "choices": [], "usage": saved.get("usage")})
        return b"".join((frames[:at], usage, frames[at:]))

    def _envelope(self, response: dict[str, Any]) -> dict[str, Any]:
        envelope = {"id": response.get("id"), "object": self.chunk_object}
        envelope.update((k, response[k]) for k in _ENVELOPE if k in response)
        return envelope

    def chunks(self, response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
        """The SSE frames for a body, in small deltas (the frames of a run of deltas that
        differ only in their text come as one bytes)."""
        return map(b"".join, self._parts(response, include_usage))

    def _parts(self, response: dict[str, Any], include_usage: bool) -> Iterator[list[bytes]]:
        """`chunks`, each as the parts it joins from (the stream is joined once, not a
        run's frames first and then the whole)."""
        envelope = self._envelope(response)
        for choice in response["choices"]:
            index = choice["index"]
            for delta in self.deltas(choice):
                if isinstance(delta, Run):
                    yield _run(envelope, index, delta)
                    continue
                part = {"index": index, "logprobs": None, **delta, "finish_reason": None}
                yield [frame({**envelope, "choices": [part]})]
            finish = {"index": index, **self.finish, "logprobs": None,
                      "finish_reason": choice.get("finish_reason")}
            if "stop_reason" in choice:
                finish["stop_reason"] = choice["stop_reason"]
            yield [frame({**envelope, "choices": [finish]})]
        if include_usage:
            yield [frame({**envelope, "choices": [], "usage": response.get("usage")})]
        yield [DONE]


def _is_done(frame_: bytes) -> bool:
    data = sse.data_of(frame_)
    return data is not None and sse.is_done(data)


def _run(envelope: dict[str, Any], index: int, run: Run) -> list[bytes]:
    """The frames of a run of deltas: the frame encoded once, split where the text goes,
    and the pieces put in (exactly what encoding each frame whole gives)."""
    part = {"index": index, "logprobs": None, **run.marked, "finish_reason": None}
    around = frame({**envelope, "choices": [part]}).split(_MARK_JSON)
    joined = joined_deltas(run.text)
    if len(around) == 2 and joined is not None:
        return sse.fill(around[0], around[1], joined)
    # a saved field holds the mark itself, or the text a "\x00" (never, in practice):
    # encode each frame whole
    marked = orjson.dumps(run.marked)
    return [frame({**envelope, "choices": [{
        "index": index, "logprobs": None,
        **orjson.loads(marked.replace(_MARK_JSON, orjson.dumps(text))), "finish_reason": None}]})
        for text in split_deltas(run.text)]
