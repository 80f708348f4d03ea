"""oe-eval (OLMES) predictions: `task-NNN-<task>-predictions.jsonl`.

A row is one doc: `doc_id`, `native_id`, `metrics` (flat: `exact_match`, `pass_at_1`, and
bookkeeping such as `num_tokens` or `max_tokens_reached`, all compared), `model_output`
(one entry per request row: `continuation`, `model_answer`). An instance is (task,
doc_id), `native_id` its witness. The task is the file's `task-NNN-<task>` (two tasks of a
run may share a name; only NNN tells them apart). The replay reader files a doc's
exchanges by its predictions row.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import LoadError
from ..saved.formats.oe_eval import TASK_FILE
from .verdicts import SavedAs, Score, Verdict, doc_rows, each_or_one, head, resolved, value_of

NAME = "oe-eval"


def detect(path: Path) -> bool:
    match = TASK_FILE.fullmatch(path.name)
    return (match is not None and match[2] == "predictions.jsonl"
            and head(path).lstrip().startswith(b'{"doc_id"'))


def read(path: Path) -> Iterator[Verdict]:
    match = TASK_FILE.fullmatch(path.name)
    assert match is not None
    file, real, task = str(path), resolved(path), match[1]
    assert real is not None
    for line, row, doc_id in doc_rows(path):
        yield _verdict(row, doc_id, task, file, real, line)


def _verdict(row: dict[str, Any], doc_id: int, task: str, file: str, real: str,
             line: int) -> Verdict:
    metrics = row.get("metrics")
    if not isinstance(metrics, dict):
        raise LoadError(file, line, "expected an object of metric -> value", field="metrics")
    outputs = row.get("model_output")
    outputs = outputs if isinstance(outputs, list) else []
    answer = each_or_one(outputs, "model_answer")
    scores = {name: Score(value_of(v), line, answer) for name, v in metrics.items()}
    native = row.get("native_id")
    return Verdict(NAME, task, str(doc_id), file, line, scores, SavedAs(real, line=line),
                   each_or_one(outputs, "continuation"),
                   ("native_id", native) if native is not None else None)

