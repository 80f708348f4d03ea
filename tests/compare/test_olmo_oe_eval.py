"""olmo-eval and oe-eval predictions as verdicts (the hand-built files of tests/data, see
their SOURCE.md): a doc per row, its native_id the witness, its requests found."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_server.commands.compare import certify
from replay_server.compare import READERS
from replay_server.compare.requests import read_requests
from replay_server.compare.sides import read_side
from replay_server.errors import LoadError

from .support import DATA, copied, rewrite_rows

OLMO = DATA / "olmo_eval" / "run_basic"
OE = DATA / "oe_eval" / "run_basic"


def test_olmo_eval_metrics_are_named_metric_colon_scorer_under_the_run_s_task_names(
        ) -> None:
    side = read_side("ORIGINAL", str(OLMO), READERS)
    assert side.harnesses == {"olmo-eval"}
    assert side.tasks == {"gsm8k", "aime_2025", "gpqa_diamond", "arc_challenge:mc"}
    doc = side.verdicts[("aime_2025", "0")]
    assert {n: s.value for n, s in doc.scores.items()} == {
        "minerva_math_flex:minerva_math_flex": 1.0, "accuracy:minerva_math_flex": 1.0,
        "pass_at_1:minerva_math_flex": 0.666667}
    assert doc.witness == ("native_id", 60)
    wrong = side.verdicts[("gsm8k", "2")].scores["accuracy:exact_match"]
    assert wrong.value == 0.0 and wrong.answer is None  # an empty answer: nothing extracted
    assert side.verdicts[("gsm8k", "0")].scores["accuracy:exact_match"].answer == "21"


def test_oe_eval_tasks_keep_their_number_and_every_metric_is_read() -> None:
    side = read_side("ORIGINAL", str(OE), READERS)
    assert side.tasks == {"task-000-gsm8k", "task-001-gsm8k", "task-002-gsm8k",
                          "task-003-ruler_niah_s_1__4096"}  # three tasks named gsm8k
    doc = side.verdicts[("task-000-gsm8k", "1")]
    assert {n: s.value for n, s in doc.scores.items()} == {
        "exact_match": 1.0, "max_tokens_reached": 1.0, "num_tokens": 512.0, "price": None}
    assert doc.witness == ("native_id", 245)


@pytest.mark.parametrize("run", [OLMO, OE, DATA / "oe_eval" / "run_vllm"])
def test_every_generation_doc_finds_its_requests(run: Path) -> None:
    """The contract with the replay readers (filed by the predictions row)."""
    side = read_side("RESCORED", str(run), READERS)
    requests = read_requests([str(run)])
    found = {v.key: len(requests.of(v)) for v in side.verdicts.values()}
    # multiple choice (loglikelihood) and a prompt cut when saved are not served
    served = {k: n for k, n in found.items() if "arc_" not in k[0] and "ruler" not in k[0]}
    assert served and all(n >= 1 for n in served.values()), found


def test_a_run_compared_with_itself_is_certified() -> None:
    for run in (OLMO, OE):
        outcome = certify(str(run), str(run))
        assert outcome.status == 0 and outcome.pairing.pairs


def test_a_reordered_rescoring_is_not_paired_by_position(tmp_path: Path) -> None:
    """doc_id is a position: the same position holding another native_id is another item."""
    rescored = copied(OE, tmp_path)
    rewrite_rows(rescored / "task-000-gsm8k-predictions.jsonl",
                 lambda rows: [{**r, "doc_id": i} for i, r in enumerate(rows[::-1])])
    outcome = certify(str(OE), str(rescored))
    assert outcome.status == 1
    reasons = {u.reason for u in outcome.unpaired if u.verdict.task == "task-000-gsm8k"}
    assert reasons == {"not the same item on both sides: native_id 1170 vs 12",
                       "not the same item on both sides: native_id 12 vs 1170",
                       "not the same item on both sides: native_id 245 vs 889",
                       "not the same item on both sides: native_id 889 vs 245"}


def test_a_bad_predictions_row_is_named(tmp_path: Path) -> None:
    run = copied(OLMO, tmp_path)
    [path] = (run / "predictions").glob("*/gsm8k_*")
    rewrite_rows(path, lambda rows: [rows[0], {**rows[1], "instance_metrics": [1.0]}])
    with pytest.raises(LoadError) as e:
        read_side("ORIGINAL", str(run), READERS)
    assert str(e.value) == (f"{path}:2: field `instance_metrics`: expected an object of "
                            "metric -> {scorer: value}")
