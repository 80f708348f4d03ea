"""A saved answer as bytes in the index file, and the seal that lets a damaged one be
told: what `file.py` writes and reads, and nothing else.

An entry (or one exchange) is a 4-byte header length, the header (JSON: the Entry's shape,
each exchange without its body), then the exchanges' bodies end to end, in header order,
each followed by its recorded stream's frames when it has some.

Every value the index file holds beyond what is checked when it is opened is sealed: an
8-byte XXH3-64 checksum of it in front (`seal`). SQLite finds a damaged page's structure (a
`DatabaseError`), never its content: four overwritten bytes in an answer pass
`PRAGMA integrity_check` and would be served as the answer. A damaged value passes XXH3-64
about once in 2**64; the check costs some 0.2 us for a 1.5 KB answer, where zlib's CRC-32
(the seal of index version 4) cost 1 us on every hit: `unseal` refuses a value whose seal
fails, on every read.
"""

from __future__ import annotations

from typing import Any

import orjson
import xxhash

from .index import Bodies, Entry, Exchange, Instance
from .samples import seeds


class Damaged(ValueError):
    """A sealed value whose checksum fails, or whose seal is cut."""


SEAL_BYTES = 8


def checksum(data: bytes | memoryview) -> bytes:
    """The XXH3-64 of `data`, 8 bytes: the one checksum of the index file."""
    return xxhash.xxh3_64_digest(data)


def seal(data: bytes) -> bytes:
    """`data` with its checksum in front."""
    return checksum(data) + data


def unseal(sealed: bytes) -> bytes:
    """The value of `seal(value)`; Damaged if it is not that."""
    if len(sealed) < SEAL_BYTES or checksum(memoryview(sealed)[SEAL_BYTES:]) != sealed[
            :SEAL_BYTES]:
        raise Damaged("a saved value fails its checksum")
    return sealed[SEAL_BYTES:]


class OneBody(Bodies):
    """The body (and recorded frames) of one exchange read from the index: `start` is its
    identity, not an offset, so that an exchange keeps one identity however often it is
    read; the frames are asked for at the start -1."""

    def __init__(self, body: bytes, frames: bytes | None = None) -> None:
        self.body = body
        self.frames = frames

    def get(self, start: int, size: int) -> bytes:
        if start == -1:
            assert self.frames is not None
            return self.frames
        return self.body


def _exchange_head(e: Exchange) -> list[Any]:
    usage = list(e.sample_usage) if e.sample_usage is not None else None
    stream = [e.stream[1], e.stream[2]] if e.stream is not None else None
    return [e.start, e.size, e.n, e.file, e.line, e.instance, e.params.decode(), usage,
            stream, e.batch]


def _instance_head(i: Instance) -> list[Any]:
    return [i.where, i.unusable, [_exchange_head(e) for e in i.exchanges]]


def encode(value: Entry | Exchange) -> bytes:
    if isinstance(value, Exchange):
        head: list[Any] = ["x", _exchange_head(value)]
        exchanges = [value]
    else:
        head = ["e", value.uniform, [_instance_head(i) for i in value.instances],
                [_instance_head(i) for i in value.unusable], value.by_seed is not None]
        exchanges = [e for i in value.instances + value.unusable for e in i.exchanges]
    header = orjson.dumps(head)
    parts = [len(header).to_bytes(4, "little"), header]
    for e in exchanges:
        parts.append(e.body)
        if e.stream is not None:
            parts.append(e.bodies.get(e.stream[0], e.stream[1]))
    return b"".join(parts)  # (one copy of each body)


def decode(data: bytes) -> Entry | Exchange:
    size = int.from_bytes(data[:4], "little")
    head = orjson.loads(data[4:4 + size])
    at = 4 + size

    def exchange(h: list[Any]) -> Exchange:
        nonlocal at
        body = data[at:at + h[1]]
        at += h[1]
        usage = tuple(h[7]) if h[7] is not None else None
        stream, frames = None, None
        if h[8] is not None:
            frames = data[at:at + h[8][0]]
            at += h[8][0]
            stream = (-1, h[8][0], bool(h[8][1]))
        return Exchange(OneBody(body, frames), h[0], h[1], h[2], h[3], h[4], h[5],
                        h[6].encode(), usage, None, stream, h[9])

    def instance(h: list[Any]) -> Instance:
        return Instance(h[0], [exchange(e) for e in h[2]], h[1])

    if head[0] == "x":
        return exchange(head[1])
    entry = Entry([instance(i) for i in head[2]], [instance(i) for i in head[3]], head[1])
    if head[4]:
        entry.by_seed = seeds(entry.instances)
    return entry
