"""Shared reading for formats that save a predictions file beside a requests file.

olmo-eval and oe-eval both write one JSONL row per eval request (`doc_id`, `idx`, the
prompt in `request.context`) in one file and the outputs (`doc_id`, `model_output`) in
another. The join is on `(doc_id, idx)`; `native_id`, when both rows carry one, is the
witness that the two files describe the same run.

The requests file is read lazily: a row is looked up by key and the file is read ahead only
as far as needed, so files written in the same order (the usual case) are joined without
holding either in memory, and rows that arrive out of order wait in a buffer.
This module only reads rows; it never decides what to serve.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from ...errors import LoadError, where_of
from .base import LoadContext, json_lines, read_rows

Key = tuple[int, int]


@dataclass(slots=True)
class Row:
    """One JSONL row, with where it was read: its checks fail naming FILE:LINE and field."""

    file: str
    line: int
    obj: dict[str, Any]

    @property
    def where(self) -> str:
        return where_of(self.file, self.line)

    def fail(self, field: str, reason: str) -> LoadError:
        return LoadError(self.file, self.line, reason, field=field)

    def integer(self, field: str, default: int | None = None) -> int:
        value = self.obj.get(field, default)
        if value is None:
            raise self.fail(field, "missing")
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(field, f"expected an integer, got {orjson.dumps(value).decode()}")
        return value

    def mapping(self, field: str) -> dict[str, Any]:
        value = self.obj.get(field)
        if not isinstance(value, dict):
            raise self.fail(field, "missing" if value is None else "expected an object")
        return value


def rows(path: Path, ctx: LoadContext) -> Iterator[Row]:
    """Each row of a JSONL file; a line that is not a JSON object goes to `ctx.bad`."""
    return read_rows(json_lines(path, ctx), partial(_row, str(path)), ctx)


def _row(file: str, numbered: tuple[int, Any]) -> Row:
    line, obj = numbered
    if not isinstance(obj, dict):
        raise LoadError(file, line, "expected a JSON object")
    return Row(file, line, obj)


def skip_all(path: Path, ctx: LoadContext, reason: str) -> None:
    """Count every row of a file as left out, for one reason."""
    for row in rows(path, ctx):
        ctx.skip(reason, row.where)


def check_native_id(prediction: Row, request: Row) -> None:
    """Both rows name the same dataset instance, or the files are from different runs."""
    mine, theirs = prediction.obj.get("native_id"), request.obj.get("native_id")
    if mine is not None and theirs is not None and mine != theirs:
        raise prediction.fail(
            "native_id", f"native_id {orjson.dumps(mine).decode()} disagrees with native_id "
            f"{orjson.dumps(theirs).decode()} at {request.where} (doc_id "
            f"{prediction.obj.get('doc_id')}): the predictions and requests files do not "
            "describe the same run")


class Requests:
    """The rows of a requests file, taken by (doc_id, idx) as the predictions ask for them."""

    def __init__(self, path: Path, ctx: LoadContext) -> None:
        self.file = str(path)
        self._rows = rows(path, ctx)
        self._ctx = ctx
        self._waiting: dict[Key, Row] = {}
        self._lines: dict[Key, int] = {}

    def take(self, key: Key) -> Row | None:
        row = self._waiting.pop(key, None)
        if row is not None:
            return row
        for found, row in self._read():
            if found == key:
                return row
            self._waiting[found] = row
        return None

    def leftovers(self) -> list[Row]:
        """Rows no prediction asked for, in file order (reads the rest of the file)."""
        for found, row in self._read():
            self._waiting[found] = row
        left = sorted(self._waiting.values(), key=lambda r: r.line)
        self._waiting.clear()
        return left

    def _read(self) -> Iterator[tuple[Key, Row]]:
        return read_rows(self._rows, self._keyed, self._ctx)

    def _keyed(self, row: Row) -> tuple[Key, Row]:
        key = (row.integer("doc_id"), row.integer("idx", 0))
        if key in self._lines:
            raise row.fail("doc_id", f"doc_id {key[0]} idx {key[1]} is already at line "
                           f"{self._lines[key]}")
        self._lines[key] = row.line
        return key, row


class Predictions:
    """The rows of a predictions file, each doc_id once."""

    def __init__(self, path: Path, ctx: LoadContext) -> None:
        self._path = path
        self._ctx = ctx
        self._lines: dict[int, int] = {}

    def __iter__(self) -> Iterator[tuple[int, Row]]:
        return read_rows(rows(self._path, self._ctx), self._keyed, self._ctx)

    def _keyed(self, row: Row) -> tuple[int, Row]:
        doc_id = row.integer("doc_id")
        if doc_id in self._lines:
            raise row.fail("doc_id", f"doc_id {doc_id} is already at line "
                           f"{self._lines[doc_id]}")
        self._lines[doc_id] = row.line
        return doc_id, row
