"""Saved JSONL files, read line by line: every line numbered, a cut last line named.

Every reader of a JSON-lines file goes through `iter_jsonl` and `parse_line`, so that a bad
line is always reported the same way (`FILE:LINE` and the reason), a last line left cut by
a crashed writer is named rather than dropped, and no line costs more memory than the cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoadError
from ..settings import DEFAULT_MAX_LINE

READ_BUFFER = 1 << 20  # how much of a saved file is read at a time


class LineTooLong(bytes):
    """Stands for a line longer than the cap: its first bytes only."""


def iter_jsonl(path: Path, max_line: int = DEFAULT_MAX_LINE
               ) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line bytes, bytes consumed) for each non-blank line of a file.

    A last line with no newline is yielded as it is: a caller that fails to parse it says
    the file looks cut short (a crashed writer), rather than dropping it. A line longer than
    `max_line` is yielded as a `LineTooLong` holding its start, and the rest of it is read
    past in pieces, so that no line costs more memory than the cap.
    """
    number = 0
    try:
        # a big buffer: with the default one (8 KiB) a typical saved line of a few KiB
        # costs a read call every few lines and a copy across every buffer boundary
        with path.open("rb", buffering=READ_BUFFER) as f:
            while True:
                raw = f.readline(max_line + 1)
                if not raw:
                    return
                number += 1
                if len(raw) > max_line and not raw.endswith(b"\n"):
                    size = len(raw)
                    while (more := f.readline(1 << 20)) and not more.endswith(b"\n"):
                        size += len(more)
                    yield number, LineTooLong(raw[:200]), size + len(more)
                    continue
                yield number, b"" if raw.isspace() else raw, len(raw)
    except OSError as e:
        raise LoadError(str(path), number or None, f"cannot read: {e.strerror or e}") from None


def parse_line(raw: bytes, file: str, line: int, max_line: int = DEFAULT_MAX_LINE) -> Any:
    if isinstance(raw, LineTooLong):
        raise LoadError(file, line, f"the line is longer than {max_line} bytes (the cap, "
                        "--max-line-size); raise the cap if the line is meant to be this long")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if not raw.endswith(b"\n"):
            raise LoadError(file, line, "the last line is cut short (no newline at the end, "
                                        f"and {not_json(e)}); was the writer killed?"
                            ) from None
        raise LoadError(file, line, line_not_json(e)) from None


def not_json(error: orjson.JSONDecodeError) -> str:
    """Why a text is not JSON, with the column on its line (`error.lineno`, which the
    caller names as FILE:LINE): orjson's own message ends with a second position (`line 1
    column 5 (char 4)`) that, beside FILE:LINE, reads as another line."""
    return f"not valid JSON at column {error.colno}: {error.msg}"


def line_not_json(error: orjson.JSONDecodeError) -> str:
    """`not_json` for one line of JSON lines (with its newline), which the caller names:
    a line cut short ends its data after the newline, where orjson puts the error (line
    2, column 1); on the line itself, that is its end."""
    if error.lineno == 1:
        return not_json(error)
    end = len(error.doc.partition("\n")[0].rstrip("\r")) + 1
    return f"not valid JSON at column {end} (the end of the line): {error.msg}"
