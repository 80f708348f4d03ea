"""Reader for replay-server's own JSONL records (what `record` and `convert` write)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..record import MARKER, Record, validate
from .base import LoadContext, json_lines, read_rows


class NativeReader:
    """replay-server's own records (`record`, `convert`): read as they are saved."""

    name = "native"
    expects = ('replay-server records (`record`, `convert`): JSON lines with '
               '"replay_record"')

    def detect(self, path: Path, head: bytes) -> bool:
        return head.lstrip().startswith(b"{") and f'"{MARKER}"'.encode() in head

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        for path in files:
            yield from _records(path, ctx)


def _records(path: Path, ctx: LoadContext) -> Iterator[Record]:
    file = str(path)
    return read_rows(json_lines(path, ctx), lambda row: validate(row[1], file, row[0]), ctx)
