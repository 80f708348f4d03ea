"""lighteval details: `OUT/details/<model>/<date>/details_<task>|<shots>_<date>.parquet`.

One row per doc: `doc` (`id`, `task_name`), `metric` (a struct, one field per metric:
`last_number_match`, `maj@3`, ...), `model_response` (`text`, one per sample, and
`text_post_processed`). An instance is (task, doc id), the task being `doc.task_name`
(else the file name's), as the replay reader names it; rows are numbered from 1, as
FILE:LINE. Needs pyarrow (`replay-server[parquet]`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import LoadError
from ..saved.formats.lighteval import DETAILS, NO_PYARROW
from .verdicts import SavedAs, Score, Verdict, head, resolved, text_of, value_of

NAME = "lighteval"
COLUMNS = ("doc", "metric", "model_response")


def detect(path: Path) -> bool:
    return DETAILS.match(path.name) is not None and head(path, 4) == b"PAR1"


def read(path: Path) -> Iterator[Verdict]:
    match = DETAILS.match(path.name)
    assert match is not None
    file, real = str(path), resolved(path)
    assert real is not None
    for number, row in _rows(path):
        yield _verdict(row, match["task"], file, real, number)


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:  # an optional extra: only this format needs it
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise LoadError(str(path), None, NO_PYARROW) from None
    try:
        parquet = pq.ParquetFile(path)
        missing = [c for c in COLUMNS if parquet.schema_arrow.get_field_index(c) < 0]
        if missing:
            raise LoadError(str(path), None, "missing: not a lighteval details file",
                            field=missing[0])
        number = 0
        for batch in parquet.iter_batches(batch_size=256, columns=list(COLUMNS)):
            for row in batch.to_pylist():
                number += 1
                yield number, row
    except (OSError, pa.ArrowException) as e:
        raise LoadError(str(path), None, f"not a readable parquet file: {e}") from None


def _verdict(row: dict[str, Any], task: str, file: str, real: str, number: int) -> Verdict:
    doc, metric, answer = (row.get(c) or {} for c in COLUMNS)
    if doc.get("id") is None:
        raise LoadError(file, number, "missing", field="doc.id")
    if not isinstance(metric, dict):
        raise LoadError(file, number, "expected a struct of metric values", field="metric")
    task = doc["task_name"] if isinstance(doc.get("task_name"), str) else task
    texts, processed = answer.get("text"), answer.get("text_post_processed")
    shown = processed if processed else texts
    scored = text_of(shown[0] if isinstance(shown, list) and len(shown) == 1 else shown)
    scores = {name: Score(value_of(v), number, scored) for name, v in metric.items()}
    text = text_of(texts[0] if isinstance(texts, list) and len(texts) == 1 else texts)
    doc_id = str(doc["id"])
    return Verdict(NAME, task, doc_id, file, number, scores,
                   SavedAs(real, instance=f"{task}:{doc_id}"), text)
