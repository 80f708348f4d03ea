"""Text cut into token-sized pieces: how every stream made from a saved answer sends its
texts (chat and completions deltas, Responses text, reasoning and argument deltas), so that
a client sees small deltas, as from the server that generated them, never one."""

from __future__ import annotations

import re

PIECE = re.compile(r"\s*(?:\w{1,16}|[^\w\s])")
MARKER = "\x00"  # joins the pieces of `joined_deltas`; how orjson escapes it: ESCAPED_MARKER
ESCAPED_MARKER = b"\\u0000"


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


def joined_deltas(text: str) -> str | None:
    """`MARKER.join(split_deltas(text))`, or None when `text` holds MARKER or `\\u0000`
    (a mark could not be told from the text, before or after escaping)."""
    if MARKER in text or "\\u0000" in text:
        return None
    joined = _ascii_joined(text) if text.isascii() else None
    return joined if joined is not None else MARKER.join(split_deltas(text))


# In ASCII, \s (str.isspace) is these; \w is letters, digits and `_`; anything else is
# one piece by itself (punctuation, and control characters that are not spaces).
_SPACES = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"
_WORD = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
_WORD_RUNS = bytes.maketrans(_WORD, b"w" * len(_WORD))  # `w` is a word character itself
_LONG_WORD = b"w" * 17


def _ascii_joined(text: str) -> str | None:
    """`joined_deltas` of an ASCII text without a mark, by a few passes of str methods
    rather than one regex match per piece (None for a word of more than 16 characters:
    the regex then). A mark goes before every other character and space, and after every
    other character; then the marks that are not at a piece's start go: one of two in a
    row, one after a space (spaces open a piece), the first and the last."""
    core = text.rstrip()  # trailing whitespace goes with the last piece
    if not core:
        return text  # blank (one piece) or empty (none)
    data = core.encode("ascii")
    if _LONG_WORD in data.translate(_WORD_RUNS):
        return None
    joined = core
    for other in set(data.translate(None, _WORD + _SPACES.encode()).decode("ascii")):
        joined = joined.replace(other, MARKER + other + MARKER)
    spaces = [space for space in _SPACES if space in core]
    for space in spaces:
        joined = joined.replace(space, MARKER + space)
    joined = joined.replace(MARKER + MARKER, MARKER)
    for space in spaces:
        joined = joined.replace(space + MARKER, space)
    return joined.strip(MARKER) + text[len(core):]
