"""inspect_ai eval logs: `.eval` (a zip: `header.json`, `samples/<id>_epoch_<n>.json`) and
`.json` (the same EvalLog in one object).

An instance is (task, sample id, epoch): the task is `eval.task` of the log's header; each
sample's `scores` maps a scorer to its Score (`value`, `answer`, `explanation`). A scalar
value is the metric named after the scorer; a dict value is one metric per key
(`scorer/key`), a list one per item (`scorer[i]`). Values are read as inspect's own
`value_to_float` reads them (`verdicts.inspect_value`: C 1, P 0.5, I and N 0, yes/true 1,
no/false 0, numeric strings), so that they compare with another harness's 0/1; a value it
cannot convert is compared as it is. A sample that failed (no `scores`) has no metrics:
its partner's metrics are then one-sided, and listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoadError
from ..saved.formats.base import LoadContext
from ..saved.formats.eval_zip import eval_member, eval_samples
from ..saved.formats.inspect_ai import InspectAIReader
from ..saved.jsonl import not_json
from .verdicts import SavedAs, Score, Verdict, head, inspect_value, resolved, text_of

NAME = "inspect_ai"


def detect(path: Path) -> bool:
    return InspectAIReader().detect(path, head(path, 1 << 16))


def read(path: Path) -> Iterator[Verdict]:
    file = str(path)
    if path.suffix == ".eval":
        header = _json(eval_member(path, "header.json"), file, "header.json")
        samples: Any = eval_samples(path, LoadContext())
    else:
        header = _json(path.read_bytes(), file, None)
        samples = header.get("samples") or []
        if not isinstance(samples, list):
            raise LoadError(file, None, "expected a list of samples", field="samples")
    task = header.get("eval", {}).get("task") if isinstance(header.get("eval"), dict) else None
    if not isinstance(task, str) or not task:
        raise LoadError(file, None, "missing: the task's name", field="eval.task")
    real = resolved(path)
    assert real is not None
    for sample in samples:
        yield _verdict(sample, task, file, real)


def _json(data: bytes | None, file: str, member: str | None) -> dict[str, Any]:
    where = f"{member}: " if member else ""
    if data is None:
        raise LoadError(file, None, f"{member} is missing: not an inspect_ai log")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        if member:
            raise LoadError(file, None, f"{member}:{e.lineno}: {not_json(e)}") from None
        raise LoadError(file, e.lineno, not_json(e)) from None
    if not isinstance(value, dict):
        raise LoadError(file, None, f"{where}expected a JSON object")
    return value


def _verdict(sample: Any, task: str, file: str, real: str) -> Verdict:
    if not isinstance(sample, dict) or sample.get("id") is None:
        raise LoadError(file, None, "expected sample objects with an `id`", field="samples")
    sample_id, epoch = sample["id"], sample.get("epoch")
    place = f"sample {sample_id!r}, epoch {epoch}"
    scores: dict[str, Score] = {}
    saved = sample.get("scores")
    if saved is not None and not isinstance(saved, dict):
        raise LoadError(file, None, f"{place}: expected an object of scorer -> score",
                        field="scores")
    for scorer, score in (saved or {}).items():
        if not isinstance(score, dict) or "value" not in score:
            raise LoadError(file, None, f"{place}: expected a Score with a `value`",
                            field=f"scores.{scorer}")
        scores.update(_metrics(scorer, score["value"], text_of(score.get("answer"))))
    output = sample.get("output")
    text = text_of(output.get("completion")) if isinstance(output, dict) else None
    return Verdict(NAME, task, f"{sample_id} (epoch {epoch})", file, None, scores,
                   SavedAs(real, instance=str(sample_id), detail=("epoch", epoch)), text)


def _metrics(scorer: str, value: Any, answer: str | None) -> dict[str, Score]:
    if isinstance(value, dict):
        return {f"{scorer}/{k}": Score(inspect_value(v), None, answer) for k, v in value.items()}
    if isinstance(value, list):
        return {f"{scorer}[{i}]": Score(inspect_value(v), None, answer)
                for i, v in enumerate(value)}
    return {scorer: Score(inspect_value(value), None, answer)}
