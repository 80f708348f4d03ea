"""lm-evaluation-harness `--log_samples` files: `samples_<task>_<date>.jsonl`.

One row per (doc, filter): `doc_id`, `filter`, `metrics` (the metric names), one field per
metric with the doc's value under that filter, `resps` and `filtered_resps`, `doc_hash`.
An instance is (task, doc_id); its metric `NAME,FILTER` is named as lm-eval names it in
its results (`exact_match,strict-match`), with the row of that filter as its line and the
filtered answer as the answer scored. The task is the file name's, as the replay reader
takes it; `doc_hash` witnesses that two sides' doc N is one doc.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import LoadError
from ..saved.formats.lm_eval import SAMPLES
from .verdicts import SavedAs, Score, Verdict, doc_rows, head, resolved, text_of, value_of

NAME = "lm-eval"


def detect(path: Path) -> bool:
    return SAMPLES.match(path.name) is not None and head(path).lstrip().startswith(b'{"doc_id"')


def read(path: Path) -> Iterator[Verdict]:
    match = SAMPLES.match(path.name)
    assert match is not None
    task, file = match["task"], str(path)
    real = resolved(path)
    assert real is not None
    for line, row, doc_id in doc_rows(path):
        yield _verdict(row, doc_id, task, file, real, line)


def _verdict(row: dict[str, Any], doc_id: int, task: str, file: str, real: str,
             line: int) -> Verdict:
    names = row.get("metrics")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise LoadError(file, line, "expected a list of metric names", field="metrics")
    flt = row.get("filter")
    if not isinstance(flt, str):
        raise LoadError(file, line, "expected the filter's name", field="filter")
    answer = _answer(row.get("filtered_resps"))
    scores = {}
    for name in names:
        if name not in row:
            raise LoadError(file, line, "a metric named in `metrics` has no value in the row",
                            field=name)
        scores[f"{name},{flt}"] = Score(value_of(row[name]), line, answer)
    witness = ("doc_hash", row["doc_hash"]) if isinstance(row.get("doc_hash"), str) else None
    return Verdict(NAME, task, str(doc_id), file, line, scores,
                   SavedAs(real, instance=f"{task}:{doc_id}"), _text(row.get("resps")), witness)


def _answer(filtered: Any) -> str | None:
    """The filtered response of a one-request doc, else all of them as JSON."""
    if isinstance(filtered, list) and len(filtered) == 1:
        return text_of(filtered[0])
    return text_of(filtered)


def _text(resps: Any) -> str | None:
    """The generation: the one answer of a one-request, one-repeat doc, else all as JSON."""
    if isinstance(resps, list) and len(resps) == 1 and isinstance(resps[0], list) \
            and len(resps[0]) == 1:
        return text_of(resps[0][0])
    return text_of(resps)
