"""olmo-eval predictions: `<out>/predictions/<model>/<task>_<hash6>-predictions.jsonl`.

A row is one doc: `doc_id`, `native_id`, `model_output` (one entry per sample: `text`,
`extracted_answer`), `instance_metrics` as `{metric: {scorer: value}}`. Each value is the
metric `metric:scorer`, named as olmo-eval names its `primary_metric`
(`accuracy:exact_match`). An instance is (task, doc_id), `native_id` its witness; the
task is the name `<out>/metrics.json` gives the task whose `task_hash` ends in the file's
`<hash6>` (a rescoring with another config writes another hash, not another task), else
the file's stem. The replay reader files a doc's exchanges by its predictions row.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoadError
from ..saved.formats.olmo_eval import PREDICTIONS
from .verdicts import SavedAs, Score, Verdict, doc_rows, each_or_one, head, resolved, value_of

NAME = "olmo-eval"


def detect(path: Path) -> bool:
    if not path.name.endswith(PREDICTIONS) or path.parent.parent.name != "predictions":
        return False
    if path.name.startswith("task-") and path.name[5:8].isdigit():
        return False  # oe-eval's naming
    return head(path).lstrip().startswith(b'{"doc_id"')


def read(path: Path) -> Iterator[Verdict]:
    file, real = str(path), resolved(path)
    assert real is not None
    task = _task(path)
    for line, row, doc_id in doc_rows(path):
        yield _verdict(row, doc_id, task, file, real, line)


def _task(path: Path) -> str:
    """The task's name in the run's metrics.json, by the hash in the file name."""
    stem = path.name[: -len(PREDICTIONS)]
    name, _, hash6 = stem.rpartition("_")
    metrics = path.parent.parent.parent / "metrics.json"
    if not name or len(hash6) != 6 or not metrics.is_file():
        return stem
    try:
        tasks = orjson.loads(metrics.read_bytes()).get("tasks")
    except (orjson.JSONDecodeError, AttributeError) as e:
        raise LoadError(str(metrics), None, f"not a valid metrics.json: {e}") from None
    found = {t.get("task") for t in tasks if isinstance(t, dict)
             and str(t.get("task_hash", "")).endswith(hash6)} if isinstance(tasks, list) else set()
    named = found.pop() if len(found) == 1 else None
    return named if isinstance(named, str) and named else stem

def _verdict(row: dict[str, Any], doc_id: int, task: str, file: str, real: str,
             line: int) -> Verdict:
    metrics = row.get("instance_metrics")
    if not isinstance(metrics, dict):
        raise LoadError(file, line, "expected an object of metric -> {scorer: value}",
                        field="instance_metrics")
    outputs = row.get("model_output")
    outputs = outputs if isinstance(outputs, list) else []
    answer = each_or_one(outputs, "extracted_answer")
    scores = {}
    for metric, by_scorer in metrics.items():
        if isinstance(by_scorer, dict):
            scores.update({f"{metric}:{scorer}": Score(value_of(v), line, answer)
                           for scorer, v in by_scorer.items()})
        else:
            scores[metric] = Score(value_of(by_scorer), line, answer)
    native = row.get("native_id")
    return Verdict(NAME, task, str(doc_id), file, line, scores, SavedAs(real, line=line),
                   each_or_one(outputs, "text"),
                   ("native_id", native) if native is not None else None)

