"""lm-eval samples files as verdicts: one instance per doc, one metric per (metric,
filter), each from its filter's row; bad rows named FILE:LINE."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from replay_server.compare import READERS, lm_eval
from replay_server.compare.requests import read_requests
from replay_server.compare.sides import read_side
from replay_server.errors import LoadError

from .support import LM_EVAL, copied, rewrite_rows, samples


def test_a_doc_is_one_instance_with_a_metric_per_filter() -> None:
    side = read_side("ORIGINAL", str(LM_EVAL / "chat_repeats"), READERS)
    assert side.harnesses == {"lm-eval"} and len(side.verdicts) == 6
    doc = side.verdicts[("arith_chat_sampled", "0")]
    assert {n: s.value for n, s in doc.scores.items()} == {
        "exact_match,score-first": 0.0, "exact_match,maj@3": 0.0}
    assert doc.where_of("exact_match,maj@3").endswith(".jsonl:7")  # the maj@3 rows follow
    assert doc.scores["exact_match,score-first"].answer == "18"
    assert doc.witness is not None and doc.witness[0] == "doc_hash"
    assert doc.text is not None and "Sure! The answer is 18." in doc.text  # the 3 repeats


def test_every_doc_finds_the_requests_the_replay_reader_rebuilt_for_it() -> None:
    """The contract with formats/lm_eval.py: a verdict's SavedAs names its records."""
    for case in ("chat_repeats", "completions_batch"):
        side = read_side("RESCORED", str(LM_EVAL / case), READERS)
        requests = read_requests([str(LM_EVAL / case)])
        asked = {v.instance: requests.of(v) for v in side.verdicts.values()}
        assert len(asked) == 6
        repeats = 3 if case == "chat_repeats" else 1
        assert all(len(a) == repeats and a[0].request for a in asked.values())


def test_a_nan_metric_is_read_as_lm_eval_writes_it(tmp_path: Path) -> None:
    path = rewrite_rows(copied(samples("completions_batch"), tmp_path),
                        lambda rows: [{**r, "exact_match": math.nan} if r["doc_id"] == 1 else r
                                      for r in rows])
    assert "NaN" in path.read_text()
    [verdict] = [v for v in lm_eval.read(path) if v.instance == "1"]
    value = verdict.scores["exact_match,strict-match"].value
    assert isinstance(value, float) and math.isnan(value)


def _bad(tmp_path: Path, change: Any) -> str:
    path = rewrite_rows(copied(samples("chat_repeats"), tmp_path), change)
    with pytest.raises(LoadError) as e:
        read_side("ORIGINAL", str(path), READERS)
    return str(e.value).removeprefix(str(path))


def test_a_filter_row_repeated_for_a_doc_fails_naming_both_rows(tmp_path: Path) -> None:
    error = _bad(tmp_path, lambda rows: rows + rows[:1])
    assert error == (":13: arith_chat_sampled instance 0: metric exact_match,score-first was "
                     f"already read at {tmp_path / samples('chat_repeats').name}:1")


@pytest.mark.parametrize(("change", "error"), [
    (lambda rows: [{**rows[0], "doc_id": "0"}], ":1: field `doc_id`: expected an integer"),
    (lambda rows: [{k: v for k, v in rows[0].items() if k != "exact_match"}],
     ":1: field `exact_match`: a metric named in `metrics` has no value in the row"),
    (lambda rows: [{**rows[0], "filter": None}], ":1: field `filter`: expected the filter's name"),
])
def test_a_bad_row_is_named(tmp_path: Path, change: Any, error: str) -> None:
    assert _bad(tmp_path, change) == error


def test_a_line_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = copied(samples("chat_repeats"), tmp_path)
    path.write_text(path.read_text().replace("\n", "\n{oops\n", 1))
    with pytest.raises(LoadError) as e:
        read_side("ORIGINAL", str(path), READERS)
    assert str(e.value).startswith(f"{path}:2: not valid JSON")


def test_two_runs_of_a_task_in_one_folder_fail(tmp_path: Path) -> None:
    first = copied(samples("completions_batch"), tmp_path)
    copied(first, tmp_path / "again").rename(tmp_path / "again" / first.name.replace("05-40",
                                                                                      "06-40"))
    with pytest.raises(LoadError, match="one side must hold one run of each task"):
        read_side("ORIGINAL", str(tmp_path), READERS)
