"""Server-sent events as they were sent: a stream cut into its frames, bytes untouched.

`Frames` is the one frame cutter: the recorder keeps each stream's frames (an event's
lines and the blank line that ends it) so that a replay sends the same deltas, in the same
order, byte for byte; the stream aggregators read their events from it; a recorded stream
served with its usage chunk added or dropped is cut by it. Lines end in CRLF, LF or a lone
CR (the SSE spec allows all three); a frame keeps whichever it had.
"""

from __future__ import annotations

import re
from itertools import accumulate

import orjson

from .pieces import ESCAPED_MARKER


class StreamError(Exception):
    """A stream that cannot be aggregated or served: it carried an error, was cut short,
    or is not a stream of the API it was sent for."""


# A frame: lines with something on them, then a blank line (lines end in CRLF, LF or CR;
# the alternation takes a CR followed by LF as one CRLF). Where no CR is, the same rule
# written for LFs alone is matched without trying the alternation at every line end.
_FRAME = re.compile(rb"(?:[^\r\n]+(?:\r\n|\r|\n))*(?:\r\n|\r|\n)")
_LF_FRAME = re.compile(rb"(?:[^\n]+\n)*\n")


class Frames:
    """Cuts a stream into frames as it arrives, in chunks cut anywhere. `frames` are the
    whole frames so far (joined, they are the stream's bytes up to the last blank line).

    What has arrived is cut where `whole_frames` says: a stream of hundreds of frames
    costs a match each, not a Python step per line. A frame whose blank line is a CR at the very
    end of what has arrived is complete (a stream may end its lines in lone CRs); if the
    next chunk opens with an LF, the two were a CRLF, and the LF goes to that frame."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self._buffer = b""
        self._open_cr = False  # the last frame ends in a CR that an LF may follow

    def feed(self, data: bytes) -> list[bytes]:
        """Take more bytes; the frames they complete (also added to `frames`)."""
        if not data:
            return []
        if self._open_cr and data.startswith(b"\n"):
            self.frames[-1] += b"\n"
            data = data[1:]
        buffer = self._buffer + data if self._buffer else data
        new = whole_frames(buffer)
        at = sum(map(len, new))
        self._open_cr = bool(new) and at == len(buffer) and buffer.endswith(b"\r")
        self._buffer = buffer[at:]
        self.frames += new
        return new

    def finish(self) -> bytes:
        """The stream has ended: what is left (a last frame without its blank line), kept
        as a frame as it is; b"" if nothing is."""
        rest, self._buffer = self._buffer, b""
        if rest:
            self.frames.append(rest)
        return rest

    def texts(self) -> list[str] | None:
        """The frames so far as text (what a record saves), a last one still open included
        (a stream whose last line ends in a lone CR is complete before the next byte tells
        whether an LF follows), or None if one is not UTF-8."""
        rest = [self._buffer] if self._buffer else []
        try:
            return [f.decode("utf-8") for f in self.frames + rest]
        except UnicodeDecodeError:
            return None


def whole_frames(buffer: bytes) -> list[bytes]:
    """The whole frames of `buffer`, from its start, one after the other (a last frame not
    ended yet is left out). Matched frame after frame by one regular expression (its C
    engine walks the lines); when the matches cover all of `buffer`, they are its frames
    one after the other, with no step of Python's a frame."""
    pattern = _FRAME if b"\r" in buffer else _LF_FRAME
    found: list[bytes] = pattern.findall(buffer)
    if sum(map(len, found)) == len(buffer):
        return found
    found, at = [], 0  # a frame not ended yet: the frames before it, each where it starts
    for match in pattern.finditer(buffer):
        start, end = match.span()
        if start != at:  # (a blank line inside what follows: not a frame of its own)
            break
        found.append(buffer[start:end])
        at = end
    return found


def spans(buffer: bytes) -> list[tuple[int, int]]:
    """Where the whole frames of `buffer` are: (start, end) of each (`whole_frames`)."""
    ends = list(accumulate(map(len, whole_frames(buffer))))
    return list(zip([0, *ends][:len(ends)], ends, strict=True))  # (each starts where one ended)


def cut(stream: bytes) -> list[bytes]:
    """A whole stream's frames (the last one without its blank line too, as it is)."""
    frames = Frames()
    frames.feed(stream)
    frames.finish()
    return frames.frames


def data_of(frame: bytes) -> bytes | None:
    """A frame's data as the SSE rules read it: its `data` fields' values (one space after
    the colon dropped) joined with LF; None for a frame that has none (a comment, a blank
    line, other fields only)."""
    if frame.startswith(b"data: ") and frame.count(b"\n") + frame.count(b"\r") <= 2:
        return frame[6:].rstrip(b"\r\n")  # one line of data and its blank line (the usual)
    values = [line[5:] for line in frame.splitlines()
              if line.startswith(b"data:") or line == b"data"]
    if not values:
        return None
    return b"\n".join(v[1:] if v.startswith(b" ") else v for v in values)


def is_done(data: bytes) -> bool:
    """Whether an event's data is the `[DONE]` that ends a chat or completions stream."""
    return data == b"[DONE]" or data.strip() == b"[DONE]"


def fill(head: bytes, tail: bytes, joined: str) -> list[bytes]:
    """`head + json(piece) + tail` for each piece of `joined` (texts joined with "\\x00",
    none holding it or `\\u0000`: `pieces.joined_deltas`), as parts that joined are the
    frames of a run of deltas that differ only in their text. The whole is escaped once
    and the frame boundaries put at the marks: a few passes over the text, not one
    encoding per piece."""
    if not joined:
        return []
    escaped = orjson.dumps(joined)
    return [head, escaped.replace(ESCAPED_MARKER, b'"' + tail + head + b'"'), tail]
