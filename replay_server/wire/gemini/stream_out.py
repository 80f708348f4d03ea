"""A Gemini stream out: the chunks Google's API sends for a saved response, and the framing
the request asks for.

A recorded stream is sent as it was recorded; a response saved whole is cut into chunks,
each a whole GenerateContentResponse (its `modelVersion`, `responseId`, ... on every
chunk): per candidate, its text parts in pieces of a few tokens (a thought signature on
the last piece of its part), any other part whole; the candidate's `finishReason`, safety
ratings and other fields on its last chunk; `usageMetadata` on the last chunk of all.
`stream_in` adds them up to the saved response exactly (a text part that would join the
one before it starts in the same chunk as that one ends).

The framing is transport: server-sent events for `alt=sse` (`data: CHUNK` and a blank
line, CRLF, no end marker, as the API sends them), else one JSON array of the chunks.
A recorded stream is re-framed when the request asks for the other framing: the same
chunks, in the same order (`framed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from .. import sse
from ..pieces import split_deltas
from ..selection import Saved, Selection, whole
from .answer import CANDIDATES
from .reply import USAGE, body
from .stream_in import joins, text_piece

PIECES = 4  # text pieces (`pieces.split_deltas`) a chunk: a few tokens
SSE_TYPE = b"text/event-stream"
JSON_TYPE = b"application/json"


def _text_chunks(part: dict[str, Any]) -> list[dict[str, Any]]:
    """A text part cut into pieces of a few tokens, its signature on the last."""
    texts = split_deltas(part["text"]) or [""]
    grouped = ["".join(texts[i:i + PIECES]) for i in range(0, len(texts), PIECES)]
    same = {k: v for k, v in part.items() if k not in ("text", "thoughtSignature")}
    pieces = [{"text": text, **same} for text in grouped]
    if "thoughtSignature" in part:
        pieces[-1]["thoughtSignature"] = part["thoughtSignature"]
    return pieces


def _candidate_chunks(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidate entries of a candidate's chunks, in order."""
    index = {"index": candidate["index"]} if "index" in candidate else {}
    content = candidate.get("content")
    if not isinstance(content, dict) or not content.get("parts"):
        return [candidate]
    around = {k: v for k, v in content.items() if k != "parts"}
    chunks: list[list[dict[str, Any]]] = []
    for part in content["parts"]:
        pieces = _text_chunks(part) if text_piece(part) else [part]
        if chunks and joins(chunks[-1][-1], pieces[0]):
            chunks[-1].append(pieces.pop(0))  # (so that it starts a part of its own)
        chunks += [[piece] for piece in pieces]
    entries = [{"content": {**around, "parts": parts}, **index} for parts in chunks]
    entries[-1].update({k: v for k, v in candidate.items() if k != "content"})
    return entries


def chunks_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a saved response's stream."""
    candidates = response.get(CANDIDATES)
    if not candidates:
        return [response]
    top = {k: v for k, v in response.items() if k not in (CANDIDATES, USAGE)}
    chunks = [{CANDIDATES: [entry], **top}
              for candidate in candidates for entry in _candidate_chunks(candidate)]
    if USAGE in response:
        chunks[-1][USAGE] = response[USAGE]
    return chunks


def event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"


def stream(selections: Sequence[Selection[Saved]], include_usage: bool) -> bytes:
    """The stream of a reply: a recorded stream as recorded (in its own framing), else the
    events of the response the request gets."""
    exchange = whole(selections)
    if exchange is not None and exchange.frames is not None:
        return exchange.frames
    response = orjson.loads(exchange.body) if exchange is not None else body(selections)
    return b"".join(event(chunk) for chunk in chunks_of(response))


def _is_array(stream: bytes) -> bool:
    return stream.lstrip()[:1] == b"["


def framed(data: dict[str, Any], stream: bytes) -> tuple[bytes, bytes]:
    """A stream as the request asks it framed (`alt=sse`: server-sent events; else one
    JSON array), and its content type: as it is when it is framed so (a recorded stream,
    byte for byte), else its chunks re-framed."""
    if data.get("alt") == "sse":
        if not _is_array(stream):
            return SSE_TYPE, stream
        return SSE_TYPE, b"".join(event(chunk) for chunk in orjson.loads(stream))
    if _is_array(stream):
        return JSON_TYPE, stream
    chunks = [chunk for frame in sse.cut(stream) if (chunk := sse.data_of(frame))]
    return JSON_TYPE, b"[" + b"\r\n,".join(chunks) + b"]"
