"""`replay-server compare` as users run it: the table, --json, the exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from replay_server.cli import main

from .support import LM_EVAL, copied_samples, rewrite_rows, samples


def compare(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["compare", *map(str, args)])


def test_a_run_rescored_identically_is_certified() -> None:
    result = compare(LM_EVAL / "chat_repeats", LM_EVAL / "chat_repeats")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[2] == "paired by the harness's instance ids: 6 pairs"
    assert lines[5].split() == ["arith_chat_sampled", "exact_match,maj@3", "6", "6", "0", "0",
                                "McNemar", "p=1", "(0", "1->0,", "0", "0->1)"]
    assert lines[-1] == "certified: all 12 paired verdicts agree, nothing unpaired"


def test_flips_are_listed_with_both_values_and_lines() -> None:
    """Two real runs of one task (tokenized and text prompts): two verdicts differ."""
    original, rescored = samples("completions_batch"), samples("tokenized_gen")
    result = compare(original, rescored)
    assert result.exit_code == 1
    assert (f"  arith_gen 0, exact_match,strict-match: 0 -> 1; original {original}:1; "
            f"rescored {rescored}:1") in result.stdout
    assert result.stdout.splitlines()[-1] == "NOT certified: 2 flipped verdict(s)"


def test_json_holds_every_row_flip_and_statistic() -> None:
    result = compare(samples("completions_batch"), samples("tokenized_gen"), "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == 1 and data["paired_by"] == "identity" and data["pairs"] == 6
    [row] = data["rows"]
    assert (row["paired"], row["agree"], row["kind"]) == (6, 4, "binary")
    assert row["p_value"] == 1.0 and row["discordant"] == {"original_only": 1,
                                                           "rescored_only": 1}
    flip = row["flips"][1]
    assert (flip["instance"], flip["original"], flip["rescored"]) == ("2", 1.0, 0.0)
    assert (flip["original_answer"], flip["rescored_answer"]) == ("72", "70")
    assert flip["original_where"].endswith(":3") and flip["served"] is None


def test_continuous_metrics_get_the_mean_difference_and_its_interval(tmp_path: Path) -> None:
    source = samples("completions_batch")
    halved = rewrite_rows(copied_samples("completions_batch", tmp_path),
                          lambda rows: [{**r, "exact_match": r["exact_match"] / 2} for r in rows])
    data = json.loads(compare(source, halved, "--json").stdout)
    [row] = data["rows"]
    assert row["kind"] == "continuous" and "p_value" not in row
    assert row["mean_difference"] == -2 / 6  # four of six halved from 1 to 0.5
    low, high = row["interval"]
    assert low <= row["mean_difference"] <= high < 0
    assert row["bootstrap"] == {"level": 0.95, "resamples": 1000, "seed": 0}


def test_a_bad_file_is_exit_status_2_with_file_and_line(tmp_path: Path) -> None:
    """As a real process: the message on stderr, nothing on stdout."""
    bad = copied_samples("completions_batch", tmp_path)
    bad.write_text(bad.read_text() + '{"doc_id": 6, "filter": "strict-match"}\n')
    result = subprocess.run([sys.executable, "-m", "replay_server", "compare",
                             str(samples("completions_batch")), str(bad)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {bad}:7: field `metrics`: expected a list of metric "
                             "names\n")


def test_bad_options_and_missing_paths_are_exit_status_2(tmp_path: Path) -> None:
    path = samples("completions_batch")
    for args, error in [
            ((path, tmp_path / "nothing"), f"error: {tmp_path / 'nothing'}: no such file"),
            ((path, path, "--metric", "acc"), "error: --metric acc=acc: ORIGINAL has no metric"),
            ((path, path, "--pair-by", "report"), "error: --pair-by report needs --report"),
            ((path, path, "--report", tmp_path / "r.jsonl"), "error: " + str(tmp_path /
                                                                           "r.jsonl")),
            ((tmp_path, path), f"error: {tmp_path}: no scored instances found")]:
        result = compare(*args)
        assert result.exit_code == 2 and result.stderr.startswith(error), result.output
