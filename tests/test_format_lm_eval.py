"""lm-evaluation-harness `--log_samples` output, as the real harness wrote it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.formats import LoadContext
from replay_server.loader import load, plan, read
from replay_server.settings import Settings

from .support import assert_error, serving

DATA = Path(__file__).parent / "data" / "lm_eval"
# The runs this reader serves without a tokenizer (the others are test_tokens.py's).
TEXT_RUNS = [DATA / "chat_repeats", DATA / "completions_batch", DATA / "loglikelihood_mc"]
ROOT = Path(__file__).parent.parent
LOGLIKELIHOOD = ("loglikelihood request (lm-eval saves only the summed logprob, not the token "
                 "logprobs a replay needs)")
DUPLICATE = "row repeats a doc already read (one row per filter)"


def wire(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / case / "wire.jsonl").read_text().splitlines()]


def samples_file(case: str) -> Path:
    return next((DATA / case).glob("*/samples_*.jsonl"))


def rows(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in samples_file(case).read_text().splitlines()]


def test_load_counts_dedupes_filters_and_skips_loglikelihood() -> None:
    loaded = load(TEXT_RUNS, progress=False)
    run = loaded.index.models["tiny-model"]
    assert (run.records, len(run.entries), run.samples, run.unusable_records) == (24, 12, 24, 0)
    assert loaded.ctx.skipped == {LOGLIKELIHOOD: 6, DUPLICATE: 6}
    assert loaded.ctx.skipped_examples[DUPLICATE][0] == f"{samples_file('chat_repeats')}:7"
    assert not any(p.name.startswith("results_") for p in loaded.plan.ignored)


@pytest.mark.http
def test_chat_repeats_replay_in_saved_order_then_run_out() -> None:
    calls = wire("chat_repeats")
    # strict: the rebuilt max_tokens/temperature/stop/seed are the ones lm-eval sent.
    with serving([DATA / "chat_repeats"], Settings(strict=True)) as url:
        with httpx.Client(base_url=url) as http:
            for call in calls:
                got = http.post("/chat/completions", json=call["request"])
                assert got.status_code == 200, got.text
                choice = got.json()["choices"][0]
                assert choice["message"]["content"] == \
                    call["response"]["choices"][0]["message"]["content"]
                assert choice["finish_reason"] is None and got.json()["usage"] is None
            assert_error(http.post("/chat/completions", json=calls[0]["request"]), 400,
                         "replay_exhausted")


@pytest.mark.http
def test_resps_are_what_the_openai_client_gets_one_call_per_repeat() -> None:
    row = rows("chat_repeats")[1]
    request = wire("chat_repeats")[3]["request"]
    assert request["messages"] == json.loads(row["arguments"]["gen_args_0"]["arg_0"][0])
    with serving([DATA / "chat_repeats"]) as url, openai.OpenAI(
            base_url=url, api_key="x", max_retries=0) as client:
        texts = [client.chat.completions.create(**request).choices[0].message.content
                 for _ in row["resps"][0]]
        assert texts == row["resps"][0]


@pytest.mark.http
def test_batched_completions_get_the_saved_texts_in_prompt_order() -> None:
    with serving([DATA / "completions_batch"], Settings(strict=True)) as url, openai.OpenAI(
            base_url=url, api_key="x", max_retries=0) as client:
        for call in wire("completions_batch"):
            got = client.completions.create(**call["request"])
            assert [c.text for c in got.choices] == \
                [c["text"] for c in call["response"]["choices"]]
            assert [c.finish_reason for c in got.choices] == [None] * len(got.choices)


@pytest.mark.http
def test_a_string_prompt_at_batch_size_one_matches_too() -> None:
    call = wire("completions_batch")[1]
    with serving([DATA / "completions_batch"]) as url, httpx.Client(base_url=url) as http:
        got = http.post("/completions", json={**call["request"],
                                              "prompt": call["request"]["prompt"][0]})
        assert got.json()["choices"][0]["text"] == call["response"]["choices"][0]["text"]


@pytest.mark.http
def test_loglikelihood_requests_are_never_answered() -> None:
    with serving([DATA]) as url, httpx.Client(base_url=url) as http:
        for call in wire("loglikelihood_mc")[:2]:
            assert_error(http.post("/completions", json=call["request"]), 400,
                         "replay_no_match")


def copy_case(case: str, tmp_path: Path, folder: str = "tiny-model") -> Path:
    target = tmp_path / folder
    target.mkdir()
    for path in samples_file(case).parent.iterdir():
        shutil.copy(path, target / path.name)
    return next(target.glob("samples_*.jsonl"))


def rewrite(path: Path, change: Any) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    change(lines)
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))


@pytest.mark.http
def test_the_null_answer_placeholder_is_unusable(tmp_path: Path) -> None:
    path = copy_case("chat_repeats", tmp_path)

    def placeholder(lines: list[dict[str, Any]]) -> None:
        for row in lines:
            if row["doc_id"] == 0:
                row["resps"][0][1] = "LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER"

    rewrite(path, placeholder)
    loaded = load([tmp_path], progress=False)
    assert loaded.index.models["tiny-model"].unusable_records == 1
    with serving([tmp_path]) as url, httpx.Client(base_url=url) as http:
        error = assert_error(http.post("/chat/completions",
                                       json=wire("chat_repeats")[0]["request"]),
                             400, "replay_unusable")
        assert "null-answer placeholder" in error["message"] and f"{path}:1" in error["message"]


def test_without_a_results_file_the_model_is_the_folder_name(tmp_path: Path) -> None:
    path = copy_case("completions_batch", tmp_path, folder="org__model")
    next(path.parent.glob("results_*.json")).unlink()
    record = next(read(plan([tmp_path]), LoadContext()))
    assert record.model == "org__model"
    # lm-eval's defaults when the run's settings are unknown: no eos in `stop`, seed 1234.
    assert record.request == {"prompt": "Question: What is 12 + 7?\nAnswer:",
                              "model": "org__model", "max_tokens": 32, "temperature": 0.0,
                              "stop": ["\n\n", "Question:"], "seed": 1234}


@pytest.mark.parametrize(("change", "line", "field"), [
    (lambda rows: rows[2].pop("resps"), 3, "resps"),
    (lambda rows: rows[1]["arguments"].pop("gen_args_0"), 2, "arguments"),
    (lambda rows: rows[4]["arguments"]["gen_args_0"].update(arg_0=["{not json"]), 5,
     "arguments.gen_args_0.arg_0"),
    (lambda rows: rows[8]["resps"][0].reverse(), 9, "resps"),  # doc 2 again, other resps
])
def test_bad_rows_name_file_line_and_field(tmp_path: Path, change: Any, line: int,
                                           field: str) -> None:
    path = copy_case("chat_repeats", tmp_path)
    rewrite(path, change)
    with pytest.raises(LoadError) as error:
        load([tmp_path], progress=False)
    assert (error.value.file, error.value.line, error.value.field) == (str(path), line, field)


def test_a_broken_line_names_file_and_line(tmp_path: Path) -> None:
    path = copy_case("completions_batch", tmp_path)
    path.write_bytes(path.read_bytes() + b'{"doc_id": 6, "doc\n')
    with pytest.raises(LoadError, match=rf"{path}:7: not valid JSON"):
        load([tmp_path], progress=False)
    loaded = load([tmp_path], progress=False, skip_bad_lines=True)
    assert loaded.index.models["tiny-model"].records == 6 and len(loaded.ctx.bad_lines) == 1


def test_inspect_shows_the_skips_and_convert_replays_identically(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "replay_server"]
    report = json.loads(subprocess.run([*cli, "inspect", *TEXT_RUNS, "--json"],
                                       capture_output=True, text=True, cwd=ROOT,
                                       check=True).stdout)
    assert report["skipped"][LOGLIKELIHOOD]["count"] == 6
    assert report["skipped"][DUPLICATE]["count"] == 6
    out = tmp_path / "lm_eval.jsonl"
    subprocess.run([*cli, "convert", *TEXT_RUNS, "-o", out], cwd=ROOT, check=True,
                   capture_output=True)
    assert load([out], progress=False).index.models == load(TEXT_RUNS,
                                                            progress=False).index.models
    first = orjson.loads(out.read_bytes().splitlines()[0])
    assert first["source"]["harness"] == "lm-eval"
