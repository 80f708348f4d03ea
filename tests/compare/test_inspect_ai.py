"""inspect_ai logs as verdicts: (task, sample, epoch), scores read as inspect's own
value_to_float reads them."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from replay_server.compare import READERS, inspect_ai
from replay_server.compare.requests import read_requests
from replay_server.compare.sides import read_side
from replay_server.compare.verdicts import Other, inspect_value
from replay_server.errors import LoadError

from .support import INSPECT_EVAL, INSPECT_JSON, copied


def test_a_log_is_one_instance_per_sample_and_epoch_in_both_forms() -> None:
    zipped = {v.key: v for v in inspect_ai.read(INSPECT_EVAL)}
    converted = {v.key: v for v in inspect_ai.read(INSPECT_EVAL.with_suffix(".json"))}
    assert set(zipped) == set(converted) == {("inspect_arith", f"{i} (epoch 1)") for i in
                                              ("multi", "q1", "q2", "q3", "q4", "tool")}
    for key, verdict in zipped.items():
        assert verdict.scores == converted[key].scores and verdict.text == converted[key].text
    tool = zipped[("inspect_arith", "tool (epoch 1)")]
    assert tool.scores["includes"].value == 1.0  # "C"
    assert tool.scores["includes"].answer == "the answer is 5535."
    assert tool.text == "The answer is 5535."
    assert zipped[("inspect_arith", "q1 (epoch 1)")].scores["includes"].value == 0.0  # "I"


def test_every_sample_finds_its_model_calls() -> None:
    """The contract with formats/inspect_ai.py (the tool sample made two calls)."""
    for log in (INSPECT_EVAL, INSPECT_JSON):
        requests = read_requests([str(log)])
        calls = {v.instance: len(requests.of(v)) for v in inspect_ai.read(log)}
        assert calls == {"multi (epoch 1)": 1, "q1 (epoch 1)": 1, "q2 (epoch 1)": 1,
                         "q3 (epoch 1)": 1, "q4 (epoch 1)": 1, "tool (epoch 1)": 2}


@pytest.mark.parametrize(("raw", "value"), [
    ("C", 1.0), ("P", 0.5), ("I", 0.0), ("N", 0.0), ("yes", 1.0), ("False", 0.0),
    ("0.25", 0.25), (True, 1.0), (3, 3.0), (None, None),
    ("c", Other('"c"')), ("nan", Other('"nan"')), ("maybe", Other('"maybe"')),
])
def test_values_are_read_as_inspect_reads_them(raw: object, value: object) -> None:
    assert inspect_value(raw) == value


def _log(tmp_path: Path, scores: object) -> Path:
    log = orjson.loads(INSPECT_JSON.read_bytes())
    log["samples"] = log["samples"][:1]
    log["samples"][0]["scores"] = scores
    path = tmp_path / INSPECT_JSON.name
    path.write_bytes(orjson.dumps(log))
    return path


def test_dict_and_list_values_are_one_metric_each(tmp_path: Path) -> None:
    path = _log(tmp_path, {"judge": {"value": {"a": "C", "b": 0.5}},
                           "many": {"value": [1, "I"]}, "gone": {"value": float("nan")}})
    [verdict] = inspect_ai.read(path)
    values = {n: s.value for n, s in verdict.scores.items()}
    assert values.pop("gone") is None  # orjson writes NaN as null, as inspect's JSON does
    assert values == {"judge/a": 1.0, "judge/b": 0.5, "many[0]": 1.0, "many[1]": 0.0}
    assert not any(isinstance(v, float) and math.isnan(v) for v in values.values())


def test_a_failed_sample_has_no_metrics(tmp_path: Path) -> None:
    [verdict] = inspect_ai.read(_log(tmp_path, None))
    assert verdict.scores == {}


@pytest.mark.parametrize(("scores", "error"), [
    ({"includes": {"answer": "x"}},
     "field `scores.includes`: sample 'multi', epoch 1: expected a Score with a `value`"),
    (["C"], "field `scores`: sample 'multi', epoch 1: expected an object of scorer -> score"),
])
def test_a_bad_score_is_named(tmp_path: Path, scores: object, error: str) -> None:
    path = _log(tmp_path, scores)
    with pytest.raises(LoadError) as e:
        list(inspect_ai.read(path))
    assert str(e.value) == f"{path}: {error}"


def test_a_log_without_its_task_and_a_broken_zip_are_named(tmp_path: Path) -> None:
    log = orjson.loads(INSPECT_JSON.read_bytes())
    log["eval"].pop("task")
    path = tmp_path / INSPECT_JSON.name
    path.write_bytes(orjson.dumps(log))
    with pytest.raises(LoadError, match="field `eval.task`: missing: the task's name"):
        list(inspect_ai.read(path))
    broken = copied(INSPECT_EVAL, tmp_path)
    broken.write_bytes(broken.read_bytes()[:2000])
    with pytest.raises(LoadError, match="not a readable .eval zip"):
        read_side("ORIGINAL", str(broken), READERS)
