"""olmo-eval run directories (tests/data/olmo_eval, built from olmo-eval's writers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.saved.formats.olmo_eval import NO_REQUESTS, sanitize
from replay_server.settings import Settings
from tests.expected_calls import expected, play, records_by_source, unmatched_bodies
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "olmo_eval"
ROOT = Path(__file__).parents[3]
RUNS = ["run_basic", "run_old_builder", "run_ambiguous"]
THINK, INSTRUCT = "allenai/Olmo-3-7B-Think", "allenai/OLMo-2-1124-7B-Instruct"
LOGLIKELIHOOD = "loglikelihood request (not a generation)"
GPQA = "gpqa_diamond_e18d67"


def copy(tmp_path: Path, run: str = "run_basic") -> Path:
    return Path(shutil.copytree(DATA / run, tmp_path / run))


def task_file(run: Path, kind: str, task: str = GPQA) -> Path:
    return next((run / kind).glob(f"*/{task}-{kind}.jsonl"))


def load_error(path: Path) -> LoadError:
    with pytest.raises(LoadError) as caught:
        load([path], progress=False)
    return caught.value


def test_load_counts_and_skipped_loglikelihood_rows() -> None:
    loaded = load([DATA / "run_basic"], progress=False)
    run = loaded.index.models[THINK]
    assert (run.records, len(run.entries), run.samples, run.unusable_records) == (11, 11, 14, 1)
    assert loaded.ctx.skipped == {LOGLIKELIHOOD: 2}
    assert loaded.ctx.skipped_examples[LOGLIKELIHOOD][0].endswith(
        "arc_challenge_mc_3930c0-requests.jsonl:1")
    assert all(p.name.startswith("expected_") for p in loaded.plan.ignored)


@pytest.mark.parametrize("run", RUNS)
def test_records_hold_the_exact_bodies_olmo_eval_sends(run: str) -> None:
    assert unmatched_bodies(DATA / run) == []


@pytest.mark.http
@pytest.mark.parametrize("run", RUNS)
def test_every_expected_call_gets_the_saved_generation(run: str) -> None:
    assert play(DATA / run, Settings(strict=True)) == {
        "run_basic": 11, "run_old_builder": 11, "run_ambiguous": 3}[run]


def test_raw_text_finish_reason_and_usage_are_what_was_saved() -> None:
    records = records_by_source(DATA / "run_basic")
    gpqa = records[f"{GPQA}-predictions.jsonl", 1, 0].response
    assert gpqa is not None
    assert gpqa["choices"][0]["message"]["content"].startswith("<think>\nStep 1:")
    assert gpqa["choices"][0]["finish_reason"] == "length"
    assert gpqa["usage"] == {"prompt_tokens": None, "completion_tokens": 1024,
                             "total_tokens": None}
    empty = records["gsm8k_c44c80-predictions.jsonl", 2, 0]
    assert empty.unusable is None and empty.response is not None
    assert empty.response["choices"][0]["text"] == ""
    old = records_by_source(DATA / "run_old_builder")[f"{GPQA}-predictions.jsonl", 0, 0]
    assert old.response is not None and old.response["usage"] is None
    assert old.response["choices"][0]["finish_reason"] is None


@pytest.mark.http
def test_n3_is_one_call_and_n1_calls_get_the_samples_in_order() -> None:
    call = expected(DATA / "run_basic", "expected_requests.jsonl")[8]
    assert call["request"]["n"] == 3
    with serving([DATA / "run_basic"]) as url, \
            openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
        whole = client.chat.completions.create(**call["request"])
        assert [c.message.content for c in whole.choices] == call["expect"]["texts"]
        assert whole.usage is not None and whole.usage.completion_tokens == 223
        assert whole.usage.prompt_tokens is None
        one = {**call["request"], "n": 1}
        alone = [client.chat.completions.create(**one) for _ in range(3)]
        assert [r.choices[0].message.content for r in alone] == call["expect"]["texts"]
        assert [r.usage.completion_tokens for r in alone if r.usage] == [73, 55, 95]
        with httpx.Client(base_url=url) as http:
            assert_error(http.post("/chat/completions", json=one), 400, "replay_exhausted")


def test_model_name_is_the_metrics_name_when_it_matches_the_folder(tmp_path: Path) -> None:
    assert sanitize("allenai/Olmo-3 7B:v1\\x") == "allenai_Olmo-3_7B_v1_x"
    run = copy(tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["config"]["provider"]["model"] = "someone/else"
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert list(load([run], progress=False).index.models) == ["allenai_Olmo-3-7B-Think"]
    (run / "metrics.json").unlink()
    assert list(load([run], progress=False).index.models) == ["allenai_Olmo-3-7B-Think"]


def test_a_native_id_mismatch_is_a_broken_join() -> None:
    want = json.loads((DATA / "bad_native_id" / "expected_load_error.json").read_text())
    error = load_error(DATA / "bad_native_id")
    assert error.file.endswith(want["predictions_file"]) and error.line == 2
    assert error.field == "native_id"
    assert want["requests_file"] + ":2" in error.reason
    assert f"native_id {want['predictions_native_id']} disagrees with native_id " \
           f"{want['requests_native_id']}" in error.reason


def test_a_broken_line_names_file_and_line(tmp_path: Path) -> None:
    predictions = task_file(copy(tmp_path), "predictions")
    lines = predictions.read_text().splitlines()
    lines[1] = lines[1][:40]
    predictions.write_text("\n".join(lines) + "\n")
    assert str(load_error(predictions.parents[2])).startswith(f"{predictions}:2: not valid JSON")


def test_a_missing_doc_id_names_the_field(tmp_path: Path) -> None:
    predictions = task_file(copy(tmp_path), "predictions")
    lines = predictions.read_text().splitlines()
    lines[2] = lines[2].replace('"doc_id": 2, ', "")
    predictions.write_text("\n".join(lines) + "\n")
    assert str(load_error(predictions.parents[2])) == f"{predictions}:3: field `doc_id`: missing"


def test_a_prediction_with_no_request_row_is_a_broken_join(tmp_path: Path) -> None:
    requests = task_file(copy(tmp_path), "requests")
    lines = requests.read_text().splitlines()
    requests.write_text("\n".join(lines[:3] + lines[4:]) + "\n")
    error = load_error(requests.parents[2])
    assert (error.line, error.field) == (4, "doc_id")
    assert f"doc_id 3 has no row in {requests}" in error.reason


def test_predictions_without_requests_are_skipped_and_said_why(tmp_path: Path) -> None:
    run = copy(tmp_path)
    task_file(run, "requests").unlink()
    loaded = load([run], progress=False)
    assert loaded.ctx.skipped[NO_REQUESTS] == 5
    assert loaded.index.models[THINK].records == 6


def rewrite(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        change(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rows_that_cannot_be_replayed_faithfully_are_left_out(tmp_path: Path) -> None:
    run = copy(tmp_path)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    no_turns: dict[str, Any] = {"turns": []}
    rewrite(task_file(run, "predictions"), lambda row: row.update(
        {"trajectory": no_turns} if row["doc_id"] == 0 else
        {"model_output": [{"text": "", "original_text": ""}]} if row["doc_id"] == 3 else {}))
    rewrite(task_file(run, "requests"), lambda row: row["request"].update(
        {"tools": tools} if row["doc_id"] == 3 else {}))
    rewrite(task_file(run, "requests", "gsm8k_c44c80"), lambda row: row["request"][
        "provider_request"].update(input_mode="prompt_token_ids"))
    loaded = load([run], progress=False)
    assert loaded.ctx.skipped == {
        LOGLIKELIHOOD: 2,
        "completion prompt sent as token ids, which olmo-eval does not save": 4,
        "multi-turn trajectory (the saved output answers the last turn, not the saved "
        "prompt)": 1}
    model = loaded.index.models[THINK]
    assert (model.records, model.unusable_records) == (6, 2)


def test_inspect_reports_the_skips_and_convert_replays_identically(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "replay_server"]
    run = DATA / "run_basic"
    report = subprocess.run([*cli, "inspect", str(run), "--json"], capture_output=True,
                            text=True, cwd=ROOT)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["skipped"][LOGLIKELIHOOD]["count"] == 2
    out = tmp_path / "all.jsonl"
    converted = subprocess.run([*cli, "convert", str(run), "-o", str(out)],
                               capture_output=True, text=True, cwd=ROOT)
    assert converted.returncode == 0, converted.stderr
    assert load([out], progress=False).index.models == load([run], progress=False).index.models
