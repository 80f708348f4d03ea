"""The prompt catalog: for a miss, the nearest saved prompt.

A catalog holds each saved prompt of one model and endpoint kind once, as its canonical
JSON (`keys.canonical`), sorted bytewise, with where it was saved. The saved prompt that
shares the longest prefix with a request is one of the two neighbours of the request's
insertion point, so it costs one bisection, whatever holds the sorted prompts: a list in
memory (`ListCatalog`, built with the index from the records as they are loaded) or the
index file's prompt table (`file.StoredCatalog`). A miss never reads the saved files.

The longest prefix alone pairs a request that differs from a saved prompt in a letter's
case, or by a word it has more, early, with whatever unrelated prompt shares the most
bytes before that point. So the search goes on from where the match stops (`_Search`),
editing the request as the commonest drifts of a template do and keeping an edit only
if the edited request matches further: a letter of the other case there (or at the start
of one of the few words before it), or the word there left out. Each try is one more
bisection, and the tries that fail are few and bounded (`TRIES`), so a run of misses
costs a handful of bisections each.

(Where the request first differs from it: `wire.difference`.)
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from itertools import islice
from operator import eq, itemgetter
from typing import Any

import orjson

from ..wire.difference import WORD, common_prefix

_PROMPT = itemgetter(0)


class Catalog(ABC):
    """Saved prompts sorted bytewise, each with where it was saved, by position; and the
    one way the nearest of them to a request is found (`nearest`). A holder says only how
    many there are and what is at a position."""

    __slots__ = ()

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def prompt(self, i: int) -> bytes:
        """The canonical JSON of the i-th saved prompt, in bytewise order."""

    @abstractmethod
    def where(self, i: int) -> str:
        """Where the i-th saved prompt was saved (FILE:LINE, and the instance)."""

    def nearest(self, canonical: bytes) -> tuple[dict[str, Any], str] | None:
        """The saved prompt nearest to `canonical` (`closest`), parsed, and where it was
        saved; None for an empty catalog."""
        found = self.closest(canonical)
        if found is None:
            return None
        return orjson.loads(self.prompt(found)), self.where(found)

    def closest(self, canonical: bytes) -> int | None:
        """The position of the saved prompt nearest to `canonical`: the one sharing the
        longest prefix with it, once letters of another case and words it has more are
        edited where the match stops (see the module docstring)."""
        found = self.longest(canonical)
        if found is None:
            return None
        search = _Search(self, canonical, *found)
        search.run()
        return search.best

    def longest(self, canonical: bytes) -> tuple[int, int] | None:
        """The position of the saved prompt sharing the longest prefix with `canonical`
        (of the two neighbours of its insertion point, the first on a tie), and the
        length of that prefix."""
        count = len(self)
        low = bisect.bisect_left(range(count), canonical, key=self.prompt)
        around = [(i, common_prefix(self.prompt(i), canonical))
                  for i in (low - 1, low) if 0 <= i < count]
        return max(around, key=itemgetter(1)) if around else None

    def items(self) -> Iterator[tuple[bytes, str]]:
        """Every (prompt, where), in order (as an index file writes them)."""
        for i in range(len(self)):
            yield self.prompt(i), self.where(i)


class ListCatalog(Catalog):
    """The catalog in memory: (prompt, where) rows in a sorted list. A list given is
    sorted in place and kept (the index builder's own): a large catalog is never held
    twice."""

    __slots__ = ("_rows",)

    def __init__(self, saved: Iterable[tuple[bytes, str]]) -> None:
        rows = saved if isinstance(saved, list) else list(saved)
        # By prompt alone: a tuple comparison would compare the prompts twice (for equality,
        # then for order). By where too only if a prompt is there twice (the index builder
        # never gives one twice), so that the order is the same whatever order they came in.
        rows.sort(key=_PROMPT)
        if any(map(eq, map(_PROMPT, rows), map(_PROMPT, islice(rows, 1, None)))):
            rows.sort()
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def prompt(self, i: int) -> bytes:
        return self._rows[i][0]

    def where(self, i: int) -> str:
        return self._rows[i][1]


EMPTY = ListCatalog([])


EDITS = 64  # edits kept at most (an all-capitals text keeps one a letter)
TRIES = 12  # edits tried that do not help, at most: what a miss that nothing helps costs
GAIN = 8  # bytes a left-out word must let match beyond it (not a chance byte or two)
BACK = 3  # word starts before the point where the match stops, tried for a case
# Bytes looked at around where the match stops: a word longer than WORD (difference's) is
# no word a template drifts by, and the BACK words before lie within SCAN. Without the
# bounds, a miss inside a long run of letters (or of none) walked the whole prompt byte by
# byte, seconds of the event loop at the body cap.
SCAN = WORD


class _Search:
    """From the longest prefix on: the request, edited one step at a time while an edit
    lets it match a saved prompt further (`run`). `at` is where the match stops in the
    edited request `probe`; edits are made at or after `floor`, never before one kept."""

    def __init__(self, catalog: Catalog, probe: bytes, best: int, at: int) -> None:
        self.catalog, self.probe, self.best, self.at = catalog, probe, best, at
        self.floor, self.tries = 0, TRIES

    def run(self) -> None:
        for _ in range(EDITS):
            if self.at >= len(self.probe):
                return
            at = _char_start(self.probe, self.at)
            if not (self._case_at(at) or self._word_more(at) or self._case_before(at)):
                return

    def _case_at(self, at: int) -> bool:
        """The letter where the match stops, in its other case."""
        return self._try(_swapped(self.probe, at), at + 1, at) > at

    def _word_more(self, at: int) -> bool:
        """The word the match stops in, left out (and then the next word's first letter
        in its other case: `Please, what` for `What`)."""
        start = _word_start(self.probe, at, self.floor)
        dropped, need = _dropped(self.probe, start), start + GAIN
        return (self._try(dropped, need, start) >= need
                or self._try(_swapped(dropped, start), need, start) >= need)

    def _case_before(self, at: int) -> bool:
        """The first letter of one of the words before, in its other case; and the letter
        where the match stops too, when the first goes exactly as far (a swap there can
        help only then)."""
        before = _word_starts(self.probe, _word_start(self.probe, at, self.floor), self.floor)
        for q in islice(before, BACK):
            swapped = _swapped(self.probe, q)
            reached = self._try(swapped, at + 1, q)
            if reached > at or reached == at and self._try(_swapped(swapped, at), at + 1,
                                                            q) > at:
                return True
        return False

    def _try(self, probe: bytes | None, need: int, edited_at: int) -> int:
        """How far `probe` matches a saved prompt (-1: not tried), kept if that is `need`
        bytes at least; a try that is not kept counts against `TRIES`."""
        if probe is None or self.tries <= 0:
            return -1
        found = self.catalog.longest(probe)
        if found is None or found[1] < need:
            self.tries -= 1
            return -1 if found is None else found[1]
        self.probe, (self.best, self.at), self.floor = probe, found, edited_at + 1
        return found[1]


def _char_start(data: bytes, at: int) -> int:
    """`at`, moved back to the first byte of the UTF-8 character it is in."""
    while 0 < at < len(data) and data[at] & 0xC0 == 0x80:
        at -= 1
    return at


def _swapped(data: bytes | None, at: int) -> bytes | None:
    """`data` with the letter at `at` in its other case (None: no letter there)."""
    if data is None or at >= len(data):
        return None
    size = 1 if data[at] < 0xC0 else 2 if data[at] < 0xE0 else 3 if data[at] < 0xF0 else 4
    try:
        char = data[at:at + size].decode()
    except UnicodeDecodeError:
        return None
    other = char.swapcase()
    return None if other == char else data[:at] + other.encode() + data[at + size:]


def _word_byte(data: bytes, at: int) -> bool:
    """Whether the byte at `at` is inside a word: a letter, a digit, any non-ASCII byte,
    never the `n` or `t` of a JSON escape (`\\n`)."""
    b = data[at]
    if b >= 0x80 or chr(b).isalnum():
        return not (b in b"nt" and at > 0 and data[at - 1] == 0x5C)
    return False


def _word_start(data: bytes, at: int, floor: int) -> int:
    """The start of the word `at` is in (or `at`), looked for WORD bytes back at most."""
    stop = max(floor, at - WORD)
    while at > stop and _word_byte(data, at - 1):
        at -= 1
    return at


def _word_starts(data: bytes, before: int, floor: int) -> Iterator[int]:
    """The starts of the words before `before` (and from `floor`, within SCAN bytes),
    nearest first."""
    at, stop = before, max(floor, before - SCAN)
    while at > stop:
        at -= 1
        if _word_byte(data, at) and (at == floor or not _word_byte(data, at - 1)):
            yield at


def _dropped(data: bytes, start: int) -> bytes | None:
    """`data` without the word at `start` and the spaces after it (up to a space, or the
    end of the JSON string); None if there is no word there (or one longer than WORD)."""
    end, stop = start, min(len(data), start + WORD + 1)
    while end < stop and data[end] not in b' "\\':
        end += 1
    if end - start > WORD:
        return None
    while end < len(data) and data[end] == 0x20:
        end += 1
    return data[:start] + data[end:] if end > start else None
