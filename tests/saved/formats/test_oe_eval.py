"""oe-eval (OLMES) output folders (tests/data/oe_eval, built from oe-eval's writers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.saved.formats.oe_eval import NO_REQUESTS, TRUNCATED, model_name, truncated
from replay_server.settings import Settings
from tests.expected_calls import play, unmatched_bodies
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "oe_eval"
ROOT = Path(__file__).parents[3]
MODEL = "allenai/OLMo-2-1124-7B-Instruct"
LOGLIKELIHOOD = "loglikelihood request (not a generation)"


def copy(tmp_path: Path, run: str = "run_basic") -> Path:
    return Path(shutil.copytree(DATA / run, tmp_path / run))


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def load_error(path: Path) -> LoadError:
    with pytest.raises(LoadError) as caught:
        load([path], progress=False)
    return caught.value


def test_load_counts_repeats_errors_and_truncated_prompts() -> None:
    loaded = load([DATA / "run_basic"], progress=False)
    run = loaded.index.models[MODEL]
    assert (run.records, len(run.entries), run.samples, run.unusable_records) == (13, 9, 12, 1)
    assert loaded.ctx.skipped == {TRUNCATED: 1}
    assert loaded.ctx.skipped_examples[TRUNCATED] == [
        f"{DATA / 'run_basic' / 'task-003-ruler_niah_s_1__4096-requests.jsonl'}:1"]
    vllm = load([DATA / "run_vllm"], progress=False)
    run = vllm.index.models[MODEL]
    assert (run.records, len(run.entries), run.samples, run.unusable_records) == (9, 5, 9, 0)
    assert vllm.ctx.skipped == {LOGLIKELIHOOD: 8}


@pytest.mark.parametrize("run", ["run_basic", "run_vllm"])
def test_records_hold_the_exact_bodies_litellm_sends(run: str) -> None:
    assert unmatched_bodies(DATA / run) == []


@pytest.mark.http
def test_every_expected_call_gets_the_saved_generation() -> None:
    assert play(DATA / "run_basic") == 14
    assert play(DATA / "run_vllm", Settings(strict=True)) == 9


@pytest.mark.http
def test_llm_response_is_served_verbatim() -> None:
    row = jsonl(DATA / "run_basic" / "task-000-gsm8k-predictions.jsonl")[1]
    request = jsonl(DATA / "run_basic" / "expected_requests.jsonl")[1]["request"]
    with serving([DATA / "run_basic"]) as url, httpx.Client(base_url=url) as http:
        got = http.post("/chat/completions", json=request)
    assert got.json() == row["model_output"][0]["llm_response"]


def test_model_name_drops_the_litellm_provider_prefix() -> None:
    def config(model: str, kind: str) -> dict[str, Any]:
        return {"model_config": {"model": model, "model_type": kind}}
    assert model_name(config("openai/allenai/OLMo-2", "litellm")) == "allenai/OLMo-2"
    assert model_name(config("gpt-4o", "litellm")) == "gpt-4o"
    assert model_name(config("allenai/OLMo-2", "vllm")) == "allenai/OLMo-2"
    assert model_name(config("someorg/model", "litellm")) == "someorg/model"
    assert model_name(None) is None


def test_truncation_markers_are_found_only_where_oe_eval_puts_them() -> None:
    cut = "x" * 4950 + "<<truncated 11830 chars>>" + "y" * 50
    assert truncated(cut) and truncated({"messages": [{"role": "user", "content": cut}]})
    assert truncated({"messages": [{"role": "user", "content": "a"}, "<<truncated 7 elements>>",
                                   {"role": "user", "content": "b"}]})
    assert not truncated("the marker <<truncated 3 chars>> quoted mid-text")
    assert not truncated({"messages": [{"role": "user", "content": "short"}]})


def repeats_without_seeds(tmp_path: Path, seeds: list[int] | None = None) -> Path:
    """run_vllm's chat task (assistant_prefix "Answer:") with doc 0 asked 3 times."""
    run = tmp_path / "repeats"
    run.mkdir()
    source = DATA / "run_vllm"
    request = jsonl(source / "task-000-gsm8k-requests.jsonl")[0]
    prediction = jsonl(source / "task-000-gsm8k-predictions.jsonl")[0]
    rows = []
    for idx in range(3):
        kwargs = request["request"]["generation_kwargs"]
        seeded = {**kwargs, "seed": seeds[idx]} if seeds else kwargs
        rows.append({**request, "idx": idx,
                     "request": {**request["request"], "generation_kwargs": seeded}})
    write(run / "task-000-gsm8k-requests.jsonl", rows)
    outputs = [{**prediction["model_output"][0], "continuation": f" answer {i}"}
               for i in range(3)]
    write(run / "task-000-gsm8k-predictions.jsonl", [{**prediction, "model_output": outputs}])
    metrics = json.loads((source / "task-000-gsm8k-metrics.json").read_text())
    if seeds:
        metrics["task_config"]["generation_kwargs"]["generation_seeds"] = seeds
    (run / "task-000-gsm8k-metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.mark.http
def test_repeats_sharing_one_request_send_the_earlier_prefixes(tmp_path: Path) -> None:
    run = repeats_without_seeds(tmp_path)
    base = jsonl(DATA / "run_vllm" / "expected_requests.jsonl")[0]["request"]
    prefix = {"role": "assistant", "content": "Answer:"}
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        for i in (2, 0, 1):
            got = http.post("/chat/completions",
                            json={**base, "messages": base["messages"] + [prefix] * i})
            assert got.json()["choices"][0]["message"]["content"] == f" answer {i}"


@pytest.mark.http
def test_seeded_repeats_are_served_by_seed_in_any_order_any_number_of_times(
        tmp_path: Path) -> None:
    run = repeats_without_seeds(tmp_path, seeds=[1, 2, 3])
    base = jsonl(DATA / "run_vllm" / "expected_requests.jsonl")[0]["request"]
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        for i in [2, 0, 1, 2, 0, 1]:  # concurrent repeats arrive in any order; a second pass
            got = http.post("/chat/completions", json={**base, "seed": i + 1})
            assert got.json()["choices"][0]["message"]["content"] == f" answer {i}"
        assert_error(http.post("/chat/completions", json={**base, "seed": 7}), 400,
                     "replay_params_mismatch", "seed")
        # without a seed, the repeats come in saved order, as before
        for i in range(3):
            got = http.post("/chat/completions", json=base)
            assert got.json()["choices"][0]["message"]["content"] == f" answer {i}"
        assert_error(http.post("/chat/completions", json=base), 400, "replay_exhausted")


def test_predictions_without_requests_are_skipped_and_said_why(tmp_path: Path) -> None:
    run = copy(tmp_path)
    (run / "task-001-gsm8k-requests.jsonl").unlink()
    loaded = load([run], progress=False)
    assert loaded.ctx.skipped[NO_REQUESTS] == 3
    assert loaded.index.models[MODEL].records == 10


def test_no_model_name_is_a_load_error(tmp_path: Path) -> None:
    run = copy(tmp_path, "run_vllm")
    (run / "task-000-gsm8k-metrics.json").unlink()
    (run / "metrics.json").unlink()
    error = load_error(run)
    assert error.file.endswith("task-000-gsm8k-predictions.jsonl")
    assert error.field == "model_config.model"


def test_a_native_id_mismatch_is_a_broken_join(tmp_path: Path) -> None:
    predictions = copy(tmp_path) / "task-001-gsm8k-predictions.jsonl"
    rows = jsonl(predictions)
    rows[1]["native_id"] = 999
    write(predictions, rows)
    error = load_error(predictions.parent)
    assert (error.file, error.line, error.field) == (str(predictions), 2, "native_id")
    assert "task-001-gsm8k-requests.jsonl:2" in error.reason


def test_a_repeat_with_no_request_row_is_a_broken_join(tmp_path: Path) -> None:
    requests = copy(tmp_path) / "task-002-gsm8k-requests.jsonl"
    write(requests, [r for r in jsonl(requests) if (r["doc_id"], r["idx"]) != (1, 2)])
    error = load_error(requests.parent)
    assert (error.line, error.field) == (2, "model_output")
    assert f"doc_id 1 idx 2 has no row in {requests}" in error.reason


def test_a_bad_doc_skipped_yields_none_of_its_repeats(tmp_path: Path) -> None:
    requests = copy(tmp_path) / "task-002-gsm8k-requests.jsonl"
    write(requests, [r for r in jsonl(requests) if (r["doc_id"], r["idx"]) != (1, 2)])
    loaded = load([requests.parent], progress=False, skip_bad_lines=True)
    assert [(e.line, e.field) for e in loaded.ctx.bad_lines] == [(2, "model_output")]
    assert loaded.index.models[MODEL].records == 13 - 3  # not the two repeats read first


def test_a_broken_line_names_file_and_line(tmp_path: Path) -> None:
    requests = copy(tmp_path) / "task-001-gsm8k-requests.jsonl"
    lines = requests.read_text().splitlines()
    requests.write_text("\n".join([lines[0], "{oops", *lines[2:]]) + "\n")
    assert str(load_error(requests.parent)).startswith(f"{requests}:2: not valid JSON")


def test_inspect_reports_the_skips_and_convert_replays_identically(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "replay_server"]
    run = DATA / "run_basic"
    report = subprocess.run([*cli, "inspect", str(run), "--json"], capture_output=True,
                            text=True, cwd=ROOT)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["skipped"][TRUNCATED]["count"] == 1
    out = tmp_path / "all.jsonl"
    converted = subprocess.run([*cli, "convert", str(run), "-o", str(out)],
                               capture_output=True, text=True, cwd=ROOT)
    assert converted.returncode == 0, converted.stderr
    assert load([out], progress=False).index.models == load([run], progress=False).index.models
