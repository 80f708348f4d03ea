"""The prompt catalog: for a miss, the nearest saved prompt.

A catalog holds each saved prompt of one model and endpoint kind once, as its canonical
JSON (`keys.canonical`), sorted bytewise, with where it was saved. The saved prompt that
shares the longest prefix with a request is one of the two neighbours of the request's
insertion point, so a miss costs one bisection, whatever holds the sorted prompts: a list
in memory (`ListCatalog`, built with the index from the records as they are loaded) or the
index file's prompt table (`file.StoredCatalog`). A miss never reads the saved files.

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

from ..wire.difference import common_prefix

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
        """The position of the saved prompt sharing the longest prefix with `canonical`:
        of the two neighbours of its insertion point, the first on a tie."""
        count = len(self)
        low = bisect.bisect_left(range(count), canonical, key=self.prompt)
        around = [i for i in (low - 1, low) if 0 <= i < count]
        if not around:
            return None
        return max(around, key=lambda i: common_prefix(self.prompt(i), canonical))

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
