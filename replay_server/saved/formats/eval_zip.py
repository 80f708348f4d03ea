"""The samples of an inspect_ai `.eval` log, read straight from the zip.

Current `.eval` members are compressed with Zstandard (zip method 93), which Python's
`zipfile` cannot unpack before 3.14: such a member's bytes are read past its local header
and decompressed here, as a stream, across every frame (inspect_ai's writer starts a new
frame every 200 MiB of input, `_util/zipfile.py`), with its size and CRC checked; deflated
or stored members go through `zipfile`. Samples come one member at a time, in epoch order,
so a big log is never held whole: a member costs its own size in memory, and no more than
its directory entry says (a damaged or hostile size is refused, not followed).
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import orjson
import zstandard

from ...errors import LoadError, where_of
from ..jsonl import not_json
from .base import LoadContext, read_rows

ZSTD_METHOD = 93
CHUNK = 1 << 20
SAMPLE = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")
CHUNKED = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)/sample\.json$")


def _epoch(info: zipfile.ZipInfo) -> int:
    match = SAMPLE.match(info.filename)
    return int(match["epoch"]) if match else 0


def eval_samples(path: Path, ctx: LoadContext) -> Iterator[dict[str, Any]]:
    """Each sample of a `.eval` zip, epoch by epoch."""
    file = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        ctx.bad(LoadError(file, None, f"not a readable .eval zip: {e}"))
        return
    with archive, path.open("rb") as raw:
        for info in archive.infolist():
            if CHUNKED.match(info.filename):
                ctx.skip("sample in inspect's chunked layout (not read)",
                         where_of(file, info.filename))
        members = sorted((i for i in archive.infolist() if SAMPLE.match(i.filename)),
                         key=_epoch)
        unread = path.stat().st_size - sum(i.compress_size for i in members)
        ctx.progress(max(unread, 0))  # the header, summaries and journal: not read

        def sample(info: zipfile.ZipInfo) -> dict[str, Any]:
            ctx.progress(info.compress_size)
            data = _member(archive, raw, info, file)
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError as e:
                raise LoadError(file, None, f"{info.filename}:{e.lineno}: {not_json(e)}"
                                ) from None
            if not isinstance(value, dict):
                raise LoadError(file, None, f"{info.filename}: expected a JSON object")
            return value

        yield from read_rows(members, sample, ctx)


def eval_member(path: Path, name: str) -> bytes | None:
    """One member of a `.eval` zip by name (`header.json`: the task, its spec and results),
    unpacked as the samples are; None when the zip has no such member."""
    file = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise LoadError(file, None, f"not a readable .eval zip: {e}") from None
    with archive, path.open("rb") as raw:
        try:
            info = archive.getinfo(name)
        except KeyError:
            return None
        return bytes(_member(archive, raw, info, file))


def _member(archive: zipfile.ZipFile, raw: IO[bytes], info: zipfile.ZipInfo,
            file: str) -> bytes | bytearray:
    """A member's bytes; Zstandard members are read past their local header by hand."""
    if info.compress_type != ZSTD_METHOD:
        try:
            return archive.read(info)
        except (zipfile.BadZipFile, NotImplementedError, zlib.error) as e:
            raise LoadError(file, None, f"{info.filename}: cannot unpack: {e}") from None
    raw.seek(info.header_offset)
    header = raw.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise LoadError(file, None, f"{info.filename}: bad zip local header")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    raw.seek(info.header_offset + 30 + name_len + extra_len)
    data = bytearray()
    crc = 0
    try:
        member = cast(IO[bytes], _Slice(raw, info.compress_size))  # read() is all it uses
        with zstandard.ZstdDecompressor().stream_reader(member, read_across_frames=True
                                                        ) as reader:
            while chunk := reader.read(CHUNK):
                if len(data) + len(chunk) > info.file_size:
                    raise LoadError(file, None, f"{info.filename}: unpacks to more than the "
                                    f"{info.file_size} bytes its zip entry says (the file is "
                                    "damaged)")
                crc = zlib.crc32(chunk, crc)
                data += chunk
    except zstandard.ZstdError as e:
        raise LoadError(file, None, f"{info.filename}: bad Zstandard data: {e}") from None
    if len(data) != info.file_size:
        raise LoadError(file, None, f"{info.filename}: unpacks to {len(data)} bytes, not the "
                        f"{info.file_size} its zip entry says (the file is damaged)")
    if crc != info.CRC:
        raise LoadError(file, None, f"{info.filename}: CRC mismatch (the file is damaged)")
    return data


class _Slice:
    """The next `size` bytes of a file, as a file the decompressor reads from: its frames
    end where the member does, not in the next member."""

    def __init__(self, raw: IO[bytes], size: int) -> None:
        self._raw = raw
        self._left = size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._raw.read(n)
        self._left -= len(data)
        return data
