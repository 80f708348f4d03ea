"""Pairing, exactly or not at all: every input that could make compare say "agree" about
verdicts that are not the same instance's is paired exactly, listed unpaired, or fails.

The reports here are real: the replay service and report writer of `run --report`,
answering the rescored run's own saved requests (the harness runs are in
test_harness_runs.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from replay_server.commands.compare import certify
from replay_server.compare.pairing import Unpaired

from .support import (
    EVALSCOPE,
    INSPECT_EVAL,
    INSPECT_JSON,
    copied,
    copied_samples,
    replayed,
    rewrite_rows,
    samples,
)


def reasons(unpaired: list[Unpaired]) -> dict[tuple[str, str], str]:
    return {(u.side, u.verdict.instance): u.reason for u in unpaired}


def test_another_run_of_the_same_task_pairs_through_the_report(tmp_path: Path) -> None:
    report = replayed(INSPECT_EVAL, INSPECT_JSON, tmp_path / "report.jsonl")
    outcome = certify(str(INSPECT_EVAL), str(INSPECT_JSON), report=report, pair_by="report")
    assert outcome.status == 0 and len(outcome.pairing.pairs) == 6
    tool = next(p for p in outcome.pairing.pairs if p.original.instance == "tool (epoch 1)")
    assert tool.rescored.instance == "tool (epoch 1)"  # both of its calls: one instance
    assert tool.served is not None and tool.served.endswith("(tool)")


def test_by_identity_a_report_says_what_answered_each_flip(tmp_path: Path) -> None:
    """With a report of the rescoring, each flip names the saved line that answered."""
    original, rescored = samples("completions_batch"), samples("tokenized_gen")
    report = replayed(original, original, tmp_path / "report.jsonl")
    outcome = certify(str(original), str(rescored), report=report)
    assert outcome.pairing.by == "identity"
    [row] = outcome.rows
    assert [f.pair.served for f in row.flips] == [f"{original}:1 (arith_gen:0)",
                                                   f"{original}:3 (arith_gen:2)"]


def test_instances_that_share_a_prompt_are_never_paired_by_it(tmp_path: Path) -> None:
    """Docs 0 and 6 ask the same prompt (and saved the same answer): the report names both
    saved instances, and which rescored doc stands for which cannot be told."""
    original = rewrite_rows(copied_samples("completions_batch", tmp_path / "a"),
                            lambda rows: rows + [{**copy.deepcopy(rows[0]), "doc_id": 6,
                                                  "exact_match": 1.0}])
    rescored = copied(original.parent, tmp_path / "b") / original.name
    report = replayed(original, rescored, tmp_path / "report.jsonl")
    outcome = certify(str(original), str(rescored), report=report, pair_by="report")
    assert outcome.status == 1 and len(outcome.pairing.pairs) == 5
    found = reasons(outcome.unpaired)
    assert set(found) == {("rescored", "0"), ("rescored", "6"), ("original", "0"),
                          ("original", "6")}
    assert found[("rescored", "6")].startswith("2 saved instances share its prompt (")
    # by the harness's own ids they are two instances, paired exactly
    assert certify(str(original), str(rescored)).status == 0


def test_repeats_of_one_saved_instance_are_never_paired_one_to_one(tmp_path: Path) -> None:
    """evalscope --repeats 3: the three repeats of a doc send one prompt, saved as one
    instance; through the report each would pair with any of the three."""
    run = EVALSCOPE / "repeats"
    report = replayed(run, run, tmp_path / "report.jsonl")
    outcome = certify(str(run), str(run), report=report, pair_by="report")
    assert not outcome.pairing.pairs and len(outcome.unpaired) == 36
    assert found_reason(outcome.unpaired, "rescored", "1 (repeat 2)").endswith(
        "which is 3 scored instances in ORIGINAL (epochs or repeats): which one cannot be "
        "told")
    assert certify(str(run), str(run)).status == 0  # by identity: doc and repeat


def test_two_rescored_instances_answered_from_one_saved_instance_are_not_paired(
        tmp_path: Path) -> None:
    """The rescoring asked doc 0's prompt twice (a doc 6 that repeats it): which of the two
    is doc 0 cannot be told."""
    original = copied_samples("completions_batch", tmp_path / "a")
    rescored = rewrite_rows(copied_samples("completions_batch", tmp_path / "b"),
                            lambda rows: rows + [{**copy.deepcopy(rows[0]), "doc_id": 6}])
    report = replayed(original, rescored, tmp_path / "report.jsonl")
    outcome = certify(str(original), str(rescored), report=report, pair_by="report")
    assert len(outcome.pairing.pairs) == 5
    found = reasons(outcome.unpaired)
    assert set(found) == {("original", "0"), ("rescored", "0"), ("rescored", "6")}
    assert found[("original", "0")] == (
        "2 rescored instances were answered from its one saved instance (arith_gen 0, "
        "arith_gen 6): repeats or epochs cannot be paired one to one")


def found_reason(unpaired: list[Unpaired], side: str, instance: str) -> str:
    return reasons(unpaired)[(side, instance)]


def test_a_request_that_missed_or_is_not_in_the_report_is_unpaired(tmp_path: Path) -> None:
    partial = rewrite_rows(copied_samples("completions_batch", tmp_path / "partial"),
                           lambda rows: rows[:4])
    report = replayed(partial, samples("completions_batch"), tmp_path / "report.jsonl")
    outcome = certify(str(partial), str(samples("completions_batch")), report=report,
                      pair_by="report")
    found = reasons(outcome.unpaired)
    assert set(found) == {("rescored", "4"), ("rescored", "5")}
    assert found[("rescored", "4")] == "its request got no saved generation (replay_no_match)"
    other = replayed(partial, partial, tmp_path / "other.jsonl")
    found = reasons(certify(str(partial), str(samples("completions_batch")), report=other,
                            pair_by="report").unpaired)
    assert found[("rescored", "5")].startswith("its request is not in the report")


def test_a_report_of_another_saved_run_pairs_nothing(tmp_path: Path) -> None:
    """The report says what answered came from files that are not ORIGINAL's."""
    elsewhere = copied_samples("completions_batch", tmp_path / "elsewhere")
    report = replayed(elsewhere, samples("completions_batch"), tmp_path / "report.jsonl")
    outcome = certify(str(samples("completions_batch")), str(samples("completions_batch")),
                      report=report, pair_by="report")
    assert not outcome.pairing.pairs
    assert found_reason(outcome.unpaired, "rescored", "0") == (
        f"it was answered from {elsewhere}:1 (arith_gen:0), which is not in ORIGINAL")
    assert found_reason(outcome.unpaired, "original", "0") == (
        "no rescored instance was answered from its saved generation")


def test_a_renamed_task_is_unpaired_unless_named(tmp_path: Path) -> None:
    source = samples("completions_batch")
    renamed = copied(source, tmp_path)
    renamed = renamed.rename(tmp_path / source.name.replace("arith_gen", "arith_gen_v2"))
    outcome = certify(str(source), str(renamed))
    assert outcome.status == 1 and len(outcome.unpaired) == 12
    assert found_reason(outcome.unpaired, "original", "3") == (
        "RESCORED has no arith_gen instance 3")
    assert certify(str(source), str(renamed), tasks=["arith_gen=arith_gen_v2"]).status == 0


def test_a_metric_on_one_side_only_is_listed_and_fails(tmp_path: Path) -> None:
    source = samples("chat_repeats")
    one_filter = rewrite_rows(copied(source, tmp_path),
                              lambda rows: [r for r in rows if r["filter"] == "score-first"])
    outcome = certify(str(source), str(one_filter))
    assert outcome.status == 1 and not outcome.unpaired
    [maj, first] = outcome.rows
    assert (maj.metric, maj.paired, len(maj.one_sided)) == ("exact_match,maj@3", 0, 6)
    assert {s.side for s in maj.one_sided} == {"original"}
    assert first.certified
    # named, only the metric both have is compared, and the other is said to be left out
    named = certify(str(source), str(one_filter), metrics=["exact_match,score-first"])
    assert named.status == 0 and named.left_out == [("original", "exact_match,maj@3", 6)]


@pytest.mark.parametrize(("option", "value", "error"), [
    ("metrics", ["exact_match,strict"], "--metric exact_match,strict=exact_match,strict: "
     "ORIGINAL has no metric exact_match,strict (it has: exact_match,strict-match)"),
    ("metrics", ["exact_match,strict-match=match"], "RESCORED has no metric match"),
    ("tasks", ["arith_gen=arith"], "--task arith_gen=arith: RESCORED has no task arith"),
    ("metrics", ["=x"], "--metric '=x': expected ORIGINAL=RESCORED or one name"),
])
def test_an_option_naming_what_is_not_there_is_refused(option: str, value: list[str],
                                                        error: str) -> None:
    path = str(samples("completions_batch"))
    with pytest.raises(ValueError) as e:
        certify(path, path, **{option: value})  # type: ignore[arg-type]
    assert error in str(e.value)


def test_nan_is_a_verdict_that_only_nan_agrees_with(tmp_path: Path) -> None:
    def nan_at(*docs: int) -> object:
        return lambda rows: [{**r, "exact_match": float("nan")} if r["doc_id"] in docs else r
                             for r in rows]
    source = samples("completions_batch")
    both = rewrite_rows(copied(source, tmp_path / "a"), nan_at(1))  # type: ignore[arg-type]
    one = rewrite_rows(copied(source, tmp_path / "b"), nan_at(1, 2))  # type: ignore[arg-type]
    assert certify(str(both), str(both)).status == 0
    outcome = certify(str(both), str(one))
    [row] = outcome.rows
    assert (row.paired, row.agree, len(row.flips)) == (6, 5, 1)
    assert row.flips[0].pair.original.instance == "2"
    assert row.kind == "binary" and len(row.numbers) == 4  # NaN pairs are not numbers


def test_across_harnesses_without_a_report_is_refused() -> None:
    with pytest.raises(ValueError, match="ORIGINAL is lm-eval and RESCORED is inspect_ai: "):
        certify(str(samples("completions_batch")), str(INSPECT_EVAL))


def test_another_doc_under_the_same_id_is_not_paired(tmp_path: Path) -> None:
    source = samples("completions_batch")
    shifted = rewrite_rows(copied(source, tmp_path),
                           lambda rows: [{**r, "doc_id": (r["doc_id"] + 1) % 6} for r in rows])
    outcome = certify(str(source), str(shifted))
    assert not outcome.pairing.pairs and len(outcome.unpaired) == 12
    assert found_reason(outcome.unpaired, "original", "0").startswith(
        "not the same item on both sides: doc_hash ")
