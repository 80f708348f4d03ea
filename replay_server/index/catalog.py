"""The prompt catalog: for a miss, the nearest saved prompt.

A catalog holds each saved prompt once, as its canonical JSON (`keys.canonical`), sorted
bytewise. The saved prompt sharing the longest prefix with a request is one of the two
neighbours of the request's insertion point, so a miss costs one bisection over bytes (and
decompressing a few prompts: the catalog is held compressed, 3-4x smaller). The catalog is
built with the index, from the records as they are loaded (an index file keeps its own,
sorted the same way): a miss never reads the saved files and never waits.

(Where the request first differs from it: `wire.difference`.)
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, islice
from operator import eq, itemgetter
from typing import Any, Protocol

import orjson
import zstandard

from ..wire.difference import common_prefix

EXCERPT = 24
BLOCK = 4  # prompts a compressed block of the catalog holds
_LEVEL = 3  # zstd's default
_TRAIN_FROM = 1000  # prompts from which a catalog trains a compression dictionary
_SAMPLES = 1000  # prompts it trains on, evenly spread over the sorted catalog
_SAMPLE = 8192  # bytes of each (training takes longer than building with more)
_DICTIONARY = 32768  # bytes
_MANY = 64  # blocks from which a catalog compresses them in threads
_BATCH = 1024  # blocks compressed in one call
_THREADS = min(4, os.cpu_count() or 1)
_PROMPT = itemgetter(0)


class PromptCatalog(Protocol):
    """Anything that finds the saved prompt nearest to a request: this module's in-memory
    Catalog, or the one an index file keeps (index_file.StoredCatalog)."""

    def nearest(self, canonical: bytes) -> tuple[dict[str, Any], str] | None: ...


class Catalog:
    """Saved prompts (canonical JSON) sorted bytewise, and where each was saved, kept
    compressed: blocks of `BLOCK` consecutive prompts, each block's prompts and wheres
    compressed together (zstd), end to end in one buffer.

    Sorted prompts share long prefixes (system prompts, few-shot examples), which a block
    compresses well. A large catalog also trains a dictionary on a sample of its prompts
    (what they all share: instructions, JSON structure, common words), so that blocks this
    small compress about as well as large ones would (4.2x on the bench's prompts) and a
    miss decompresses only a few prompts. A separator per block routes the bisection to the
    one block that holds the request's insertion point, so a miss decompresses one block
    (two when that point is at a block's end). Separator j is the shortest prefix of block
    j's first prompt that sorts at or after block j - 1's last prompt: every block before
    the one found sorts before the request, every block after it at or after."""

    __slots__ = ("count", "_size", "_blocks", "_ends", "_separators", "_dictionary",
                 "_local")

    def __init__(self, count: int, size: int, blocks: bytes, ends: array[int],
                 separators: list[bytes], dictionary: zstandard.ZstdCompressionDict | None
                 ) -> None:
        self.count = count
        self._size = size  # prompts a block (the last block may hold fewer)
        self._blocks = blocks
        self._ends = ends  # where each compressed block ends in `_blocks`
        self._separators = separators  # of blocks 1, 2, ...
        self._dictionary = dictionary
        self._local = threading.local()  # a decompressor is used by one thread at a time

    @classmethod
    def build(cls, saved: Iterable[tuple[bytes, str]], size: int = BLOCK) -> Catalog:
        """The catalog of `saved` (prompt, where) pairs. A list given is emptied as its
        blocks are compressed (the index builder's own): a large catalog is never held
        twice."""
        rows = _sorted(saved, reverse=True)  # taken from the end, smallest first
        count = len(rows)
        dictionary = _train([p[:_SAMPLE] for p, _ in rows[::count // _SAMPLES]]) \
            if count >= _TRAIN_FROM else None
        compress = _Compressing(dictionary)
        separators, last = [], None
        while rows:
            chunk = rows[:-size - 1:-1]
            del rows[-size:]
            prompts = [p for p, _ in chunk]
            wheres = [w.encode("utf-8", "surrogatepass") for _, w in chunk]
            if last is not None:
                separators.append(prompts[0][:common_prefix(last, prompts[0]) + 1])
            last = prompts[-1]
            sizes = array("Q", [len(p) for p in prompts] + [len(w) for w in wheres])
            compress.add(sizes.tobytes() + b"".join(prompts) + b"".join(wheres))
        blocks, ends = compress.done()
        return cls(count, size, blocks, ends, separators, dictionary)

    def __len__(self) -> int:
        return self.count

    def items(self) -> Iterator[tuple[bytes, str]]:
        """Every (prompt, where), sorted (an index file keeps them so)."""
        for i in range(len(self._ends)):
            block = self._block(i)
            for k in range(block.count):
                yield block.prompt(k), block.where(k)

    def nearest(self, canonical: bytes) -> tuple[dict[str, Any], str] | None:
        return _parsed(self.nearest_saved(canonical))

    def nearest_saved(self, canonical: bytes) -> tuple[bytes, str] | None:
        """The saved prompt sharing the longest prefix with `canonical`, of the two
        neighbours of its insertion point (the first on a tie), and where it was saved."""
        if not self.count:
            return None
        at = bisect.bisect_left(self._separators, canonical)
        block = self._block(at)
        low = bisect.bisect_left(range(block.count), canonical, key=block.prompt)
        # At a block's start (low == 0 < at) the request sorts after the separator and not
        # after the block's first prompt, so it starts with the separator: it shares more
        # with that first prompt than the previous block's last one does. Only the
        # neighbour after can be in another block.
        around = [(block, low - 1)] if low else []
        if low < block.count:
            around.append((block, low))
        elif at + 1 < len(self._ends):
            around.append((self._block(at + 1), 0))
        found, k = max(around, key=lambda row: common_prefix(row[0].prompt(row[1]), canonical))
        return found.prompt(k), found.where(k)

    def _block(self, i: int) -> _Block:
        decompressor = getattr(self._local, "decompressor", None)
        if decompressor is None:
            decompressor = self._local.decompressor = zstandard.ZstdDecompressor(
                dict_data=self._dictionary)
        return _Block(decompressor.decompress(
            memoryview(self._blocks)[self._ends[i - 1] if i else 0:self._ends[i]]),
            min(self._size, self.count - i * self._size))


class _Compressing:
    """Blocks compressed alone (a zstd frame each), end to end. They are compressed
    `_BATCH` at a time, each batch in one call that lets go of the GIL and shares the
    blocks among `_THREADS` threads: the same frames, in the same order, as compressing
    them one at a time (a small catalog does). No more than a batch is held uncompressed,
    and each batch's frames are copied out at once, so that the threads' buffers are
    reused by the next batch (held to the end, they stay in the threads' malloc arenas,
    which `malloc_trim` does not shrink)."""

    def __init__(self, dictionary: zstandard.ZstdCompressionDict | None) -> None:
        self._compressor = zstandard.ZstdCompressor(level=_LEVEL, dict_data=dictionary)
        self._waiting: list[bytes | bytearray | memoryview] = []
        self._blocks = io.BytesIO()  # (handed over in place at the end, not copied)
        self._ends = array("Q")

    def add(self, block: bytes) -> None:
        self._waiting.append(block)
        if len(self._waiting) >= _BATCH:
            self._compress()

    def done(self) -> tuple[bytes, array[int]]:
        """The frames end to end, and where each ends."""
        self._compress()
        return self._blocks.getvalue(), self._ends

    def _compress(self) -> None:
        waiting, self._waiting = self._waiting, []
        if len(waiting) < _MANY:
            frames: Iterable[Any] = map(self._compressor.compress, waiting)
        else:
            found = self._compressor.multi_compress_to_buffer(waiting, threads=_THREADS)
            frames = (found[i] for i in range(len(found)))
        write, end = self._blocks.write, self._ends.append
        for frame in frames:
            write(frame)
            end(self._blocks.tell())


class SortedCatalog:
    """The saved prompts and their wheres sorted as a Catalog sorts them, held as they
    are: what `replay-server index` builds, to write them out at once (compressing them
    only to decompress them again would be a third of the work of writing the file)."""

    __slots__ = ("_rows",)

    def __init__(self, saved: Iterable[tuple[bytes, str]]) -> None:
        self._rows = _sorted(saved, reverse=False)

    def __len__(self) -> int:
        return len(self._rows)

    def items(self) -> Iterator[tuple[bytes, str]]:
        return iter(self._rows)

    def nearest(self, canonical: bytes) -> tuple[dict[str, Any], str] | None:
        return _parsed(self.nearest_saved(canonical))

    def nearest_saved(self, canonical: bytes) -> tuple[bytes, str] | None:
        """As `Catalog.nearest_saved`."""
        found = closest(lambda i: self._rows[i][0], len(self._rows), canonical)
        return None if found is None else self._rows[found]


def _sorted(saved: Iterable[tuple[bytes, str]], reverse: bool) -> list[tuple[bytes, str]]:
    """(prompt, where) rows sorted, in place if a list is given. By prompt alone (a tuple
    comparison compares the prompts twice, for equality and then order: 2.4x the time),
    then by where too if a prompt is there twice (never from the index builder)."""
    rows = saved if isinstance(saved, list) else list(saved)
    rows.sort(key=_PROMPT, reverse=reverse)
    if any(map(eq, map(_PROMPT, rows), map(_PROMPT, islice(rows, 1, None)))):
        rows.sort(reverse=reverse)
    return rows


def _train(samples: list[bytes | bytearray | memoryview]
           ) -> zstandard.ZstdCompressionDict | None:
    try:
        return zstandard.train_dictionary(_DICTIONARY, samples, k=1024, d=8)
    except zstandard.ZstdError:  # too little to learn from: blocks are compressed alone
        return None


class _Block:
    """One decompressed block of a catalog: the sizes of its prompts and wheres, then its
    prompts, then its wheres (UTF-8), end to end."""

    __slots__ = ("data", "count", "bounds")

    def __init__(self, data: bytes, count: int) -> None:
        sizes = array("Q")
        sizes.frombytes(memoryview(data)[:16 * count])
        self.data, self.count = data, count
        self.bounds = list(accumulate(sizes, initial=16 * count))

    def prompt(self, k: int) -> bytes:
        return self.data[self.bounds[k]:self.bounds[k + 1]]

    def where(self, k: int) -> str:
        k += self.count
        return self.data[self.bounds[k]:self.bounds[k + 1]].decode("utf-8", "surrogatepass")


EMPTY = Catalog.build([])


def _parsed(found: tuple[bytes, str] | None) -> tuple[dict[str, Any], str] | None:
    return None if found is None else (orjson.loads(found[0]), found[1])


def closest(at: Callable[[int], bytes], count: int, canonical: bytes) -> int | None:
    """Of `count` items sorted bytewise (`at(i)`), the one sharing the longest prefix with
    `canonical`: a neighbour of its insertion point."""
    low = bisect.bisect_left(range(count), canonical, key=at)
    around = [i for i in (low - 1, low) if 0 <= i < count]
    if not around:
        return None
    return max(around, key=lambda i: common_prefix(at(i), canonical))
