"""Server-sent events as they were sent: a stream cut into its frames, bytes untouched.

The recorder keeps each stream's frames (an event's lines and the blank line that ends
it) so that a replay sends the same deltas, in the same order, byte for byte. Lines end in
CRLF, LF or a lone CR (the SSE spec allows all three); a frame keeps whichever it had.
"""

from __future__ import annotations

import orjson


def line_end(buffer: bytes, start: int) -> int | None:
    """Where the line of `buffer` that starts at `start` ends (after its CRLF, LF or CR), or
    None while it is incomplete (a CR at the very end may be the first half of a CRLF)."""
    lf, cr = buffer.find(b"\n", start), buffer.find(b"\r", start)
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else lf + 1
    if cr + 1 == len(buffer):
        return None
    return cr + 2 if buffer[cr + 1:cr + 2] == b"\n" else cr + 1


class Frames:
    """Collects a stream's frames as it arrives, in chunks cut anywhere. `frames` are the
    whole frames so far (joined, they are the stream's bytes up to the last blank line)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self._buffer = b""
        self._lines: list[bytes] = []

    def feed(self, data: bytes) -> None:
        buffer = self._buffer + data
        start = 0
        while (end := line_end(buffer, start)) is not None:
            line = buffer[start:end]
            self._lines.append(line)
            if not line.rstrip(b"\r\n"):
                self.frames.append(b"".join(self._lines))
                self._lines = []
            start = end
        self._buffer = buffer[start:]

    def finish(self) -> None:
        """The stream has ended: a last frame without its blank line is kept as it is."""
        rest = b"".join(self._lines) + self._buffer
        if rest:
            self.frames.append(rest)
        self._lines, self._buffer = [], b""

    def texts(self) -> list[str] | None:
        """The frames so far as text (what a record saves), a last one still open included
        (a stream whose last line ends in a lone CR is complete before the next byte tells
        whether an LF follows), or None if one is not UTF-8."""
        rest = b"".join(self._lines) + self._buffer
        try:
            return [f.decode("utf-8") for f in self.frames + ([rest] if rest else [])]
        except UnicodeDecodeError:
            return None


_MARKER = "\x00"
_ESCAPED_MARKER = b"\\u0000"  # how orjson writes it inside a JSON string


def fill(head: bytes, tail: bytes, joined: str) -> list[bytes]:
    """`head + json(piece) + tail` for each piece of `joined` (texts joined with "\\x00",
    none holding it or `\\u0000`: `openai_responses.joined_deltas`), as parts that joined
    are the frames of a run of deltas that differ only in their text. The whole is escaped
    once and the frame boundaries put at the marks: a few passes over the text, not one
    encoding per piece."""
    if not joined:
        return []
    escaped = orjson.dumps(joined)
    return [head, escaped.replace(_ESCAPED_MARKER, b'"' + tail + head + b'"'), tail]
