"""The per-instance verdict: how one harness scored one instance, and the reader protocol
that turns a harness's scored outputs into verdicts.

A `Verdict` is one instance of one task as a harness saved its scoring: each metric's
value (and the extracted answer it scored, where saved), the generation, where it was read
(FILE:LINE), and `SavedAs`: how replay-server's own reader of that harness files the
instance's saved exchanges (`source.file` and `source.instance` or `source.line`), which is
what ties a verdict to `run --report`'s record of which saved exchange answered a request.

Values are normalised once, here (`value_of`): booleans and numbers become floats (NaN is
kept: it is a value, and it equals only NaN); null is None (no value); anything else (a
string, a list, an object) is kept as its canonical JSON (`Other`) and compared exactly.
inspect_ai's categorical values go through `inspect_value`, inspect's own `value_to_float`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import orjson

from ..errors import LoadError
from ..saved.jsonl import iter_jsonl, parse_line


@dataclass(frozen=True, slots=True)
class Other:
    """A value that is not a number: its canonical JSON, compared exactly."""

    json: str

    def __str__(self) -> str:
        return self.json


Value = float | Other | None


def value_of(raw: Any) -> Value:
    """A saved metric value, normalised: bool and numbers as float, null as None, anything
    else as its canonical JSON."""
    if raw is None:
        return None
    if isinstance(raw, bool | int | float):
        return float(raw)
    return Other(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
                 .decode())


# inspect_ai's `value_to_float()` defaults (scorer/_metric.py): CORRECT "C" 1, PARTIAL "P"
# 0.5, INCORRECT "I" and NOANSWER "N" 0; then yes/true 1 and no/false 0 (any case), and
# strings of a finite number. What it cannot convert it scores 0 with a warning; here such a
# value is kept as it is, so that two different strings never "agree" as 0.
_CATEGORIES = {"C": 1.0, "P": 0.5, "I": 0.0, "N": 0.0}
_WORDS = {"yes": 1.0, "true": 1.0, "no": 0.0, "false": 0.0}


def inspect_value(raw: Any) -> Value:
    """An inspect_ai score value as inspect's `value_to_float` reads it."""
    if isinstance(raw, str):
        if raw in _CATEGORIES:
            return _CATEGORIES[raw]
        if raw.lower() in _WORDS:
            return _WORDS[raw.lower()]
        try:
            number = float(raw)
        except ValueError:
            return value_of(raw)
        return number if math.isfinite(number) else value_of(raw)
    return value_of(raw)


def same(a: Value, b: Value) -> bool:
    """Whether two values are the same verdict: equal, or both NaN, or both None."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def shown(value: Value) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() else repr(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class Score:
    """One metric of one instance: its value, the line it was read from, and the extracted
    answer that was scored (where the harness saved one)."""

    value: Value
    line: int | None = None
    answer: str | None = None


@dataclass(frozen=True, slots=True)
class SavedAs:
    """How replay-server's reader of the harness files this instance's saved exchanges:
    their `source.file` (resolved) and `source.instance`, or `source.line` where the
    reader's instance id needs more than this file; `detail` is one more source field that
    tells this verdict's exchanges apart from others of the same instance (inspect_ai's
    epoch, evalscope's repeat index)."""

    file: str
    instance: str | None = None
    line: int | None = None
    detail: tuple[str, Any] | None = None

    def holds(self, source: Mapping[str, Any]) -> bool:
        """Whether a saved record's `source` is one of this instance's exchanges."""
        if resolved(source.get("file")) != self.file:
            return False
        if self.instance is not None and source.get("instance") != self.instance:
            return False
        if self.line is not None and source.get("line") != self.line:
            return False
        return self.detail is None or source.get(self.detail[0]) == self.detail[1]


def resolved(file: Any) -> str | None:
    """A file name as compared across the two sides and the report: absolute, resolved."""
    return _realpath(str(file)) if file is not None else None


@lru_cache(maxsize=4096)
def _realpath(file: str) -> str:
    return os.path.realpath(file)  # a few files, looked up once per saved record


@dataclass(slots=True)
class Verdict:
    """One instance as one harness scored it (several rows of a harness's file may add
    scores to one verdict: lm-eval writes one row per filter)."""

    harness: str
    task: str
    instance: str
    file: str
    line: int | None
    scores: dict[str, Score] = field(default_factory=dict)
    saved: SavedAs | None = None
    text: str | None = None
    # A harness field naming the same dataset item on both sides (lm-eval's doc_hash, a
    # native_id): two instances of one id whose witnesses differ are different items.
    witness: tuple[str, Any] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.task, self.instance

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def where_of(self, metric: str) -> str:
        """FILE:LINE of one metric's row (lm-eval: its filter's), else of the instance."""
        score = self.scores.get(metric)
        line = score.line if score is not None and score.line is not None else self.line
        return f"{self.file}:{line}" if line is not None else self.file


class Reader(Protocol):
    """One harness's scored outputs: `detect` claims a file from its name and first bytes,
    `read` yields its verdicts and raises `errors.LoadError` (FILE:LINE, field) on a file
    that is not what its format says."""

    NAME: str

    def detect(self, path: Path) -> bool: ...

    def read(self, path: Path) -> Iterator[Verdict]: ...


def head(path: Path, size: int = 4096) -> bytes:
    """The first bytes of a file, for `detect` (nothing when it cannot be read: the reader
    that claims it by name reports that)."""
    try:
        with path.open("rb") as f:
            return f.read(size)
    except OSError:
        return b""


def text_of(value: Any) -> str | None:
    """A saved generation or answer as text: a string as it is, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def each_or_one(outputs: list[Any], name: str) -> str | None:
    """A field of a harness's per-sample outputs: the one sample's, or every sample's as
    JSON."""
    values = [o.get(name) if isinstance(o, dict) else None for o in outputs]
    return text_of(values[0]) if len(values) == 1 else text_of(values or None)


_DIGITS = re.compile(r"(\d+)")


def order(key: tuple[str, str]) -> tuple[Any, ...]:
    """(task, instance) in natural order: doc 2 before doc 10."""
    return tuple(tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(part))
                 for part in key)


def rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a harness's JSONL file; a bad line is
    a LoadError naming FILE:LINE. Python's `json` writes a NaN or infinite metric as a bare
    `NaN` / `Infinity` (lm-eval does), which is not JSON: such a line is read as Python's
    `json` reads it, so that a NaN verdict is compared, not refused."""
    file = str(path)
    for line, raw, _ in iter_jsonl(path):
        if not raw:
            continue
        try:
            yield line, parse_line(raw, file, line)
        except LoadError as error:
            try:
                value = json.loads(raw)
            except (ValueError, RecursionError):
                raise error from None
            yield line, value


def doc_rows(path: Path) -> Iterator[tuple[int, dict[str, Any], int]]:
    """(line number, row, its `doc_id`) of each row of a harness file of one JSON object per
    doc (lm-eval's samples, oe-eval's and olmo-eval's predictions), as `rows` reads them; a
    row that is not an object, or whose `doc_id` is not an integer, is a LoadError naming
    FILE:LINE."""
    file = str(path)
    for line, row in rows(path):
        if not isinstance(row, dict):
            raise LoadError(file, line, "expected a JSON object")
        doc_id = row.get("doc_id")
        if not isinstance(doc_id, int) or isinstance(doc_id, bool):
            raise LoadError(file, line, "expected an integer", field="doc_id")
        yield line, row, doc_id
