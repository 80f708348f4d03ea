"""Reader for replay-server's own JSONL records (what `record` and `convert` write)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ...errors import LoadError
from ..record import MARKER, Record, validate
from .base import LoadContext, json_lines


class NativeReader:
    name = "native"

    def detect(self, path: Path, head: bytes) -> bool:
        return head.lstrip().startswith(b"{") and f'"{MARKER}"'.encode() in head

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        for path in files:
            yield from self._read_file(path, ctx)

    def _read_file(self, path: Path, ctx: LoadContext) -> Iterator[Record]:
        file = str(path)
        for line, value in json_lines(path, ctx):
            try:
                record = validate(value, file, line)
            except LoadError as error:
                ctx.bad(error)
                continue
            yield record
