"""evalscope reviews: `W/reviews/<model>/<dataset>_<subset>.jsonl`, beside the predictions.

A line is one sample and repeat: `index` (= `sample_score.sample_id`), and
`sample_score` with `group_id` (the doc), `generation_index` (the repeat) and `score`:
`value` (one field per metric: `Rouge-L-R`, `acc`, ...; a bare value is the metric
`main_score_name`), `extracted_prediction` and `prediction`. An instance is (task, doc,
repeat), the task being the file's stem: a run with `--repeats 3` and one without pair
their first repeats (`index` would pair another doc's repeat). Its saved exchanges are those
the replay reader reads from the predictions file of the same name, filed under the doc
(`<stem>:<group_id>`) and told apart by their `index`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import LoadError
from ..saved.formats.base import head_keys
from .verdicts import SavedAs, Score, Verdict, head, resolved, rows, text_of, value_of

NAME = "evalscope"


def detect(path: Path) -> bool:
    if path.suffix != ".jsonl" or path.parent.parent.name != "reviews":
        return False
    first = head(path, 1 << 20).split(b"\n", 1)[0]
    return {"index", "sample_score"} <= head_keys(first)


def read(path: Path) -> Iterator[Verdict]:
    file = str(path)
    predictions = path.parent.parent.parent / "predictions" / path.parent.name / path.name
    real = resolved(predictions)
    assert real is not None
    for line, row in rows(path):
        yield _verdict(row, path.stem, file, real, line)


def _verdict(row: Any, task: str, file: str, predictions: str, line: int) -> Verdict:
    if not isinstance(row, dict):
        raise LoadError(file, line, "expected a JSON object")
    index = row.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise LoadError(file, line, "expected an integer", field="index")
    sample = row.get("sample_score")
    score = sample.get("score") if isinstance(sample, dict) else None
    if not isinstance(score, dict) or "value" not in score:
        raise LoadError(file, line, "expected an object with a `value`",
                        field="sample_score.score")
    assert isinstance(sample, dict)
    answer = text_of(score.get("extracted_prediction"))
    value = score["value"]
    if isinstance(value, dict):
        scores = {name: Score(value_of(v), line, answer) for name, v in value.items()}
    else:
        scores = {str(score.get("main_score_name") or "score"): Score(value_of(value), line,
                                                                      answer)}
    group, repeat = sample.get("group_id", index), sample.get("generation_index", 0)
    return Verdict(NAME, task, f"{group} (repeat {repeat})", file, line, scores,
                   SavedAs(predictions, instance=f"{task}:{group}", detail=("index", index)),
                   text_of(score.get("prediction")))
