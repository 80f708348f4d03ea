"""`inspect` and `convert` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson

from replay_server.index.loading import load
from tests.support import chat_record, chat_response, tokenizer_record, write_jsonl

ROOT = Path(__file__).parents[2]
CLI = [sys.executable, "-m", "replay_server"]
SAVED = [ROOT / "examples", ROOT / "tests" / "data" / "openai_batch"]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_inspect_reports_models_skips_and_unusable_prompts() -> None:
    result = run("inspect", *SAVED, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    batch = report["models"]["gpt-4o-mini"]
    assert (batch["records"], batch["prompts"], batch["unusable_prompts"]) == (5, 5, 2)
    assert batch["samples_per_instance"] == {"1": 2, "2": 1}
    assert report["skipped"]["failed batch line"]["count"] == 2
    assert report["skipped"]["failed batch line"]["examples"][0].endswith("batch_output.jsonl:4")
    human = run("inspect", *SAVED).stdout
    assert "model demo/tiny-chat-model: 5 records, 5 prompts, 6 samples" in human


def test_inspect_names_ambiguous_prompts(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "r.jsonl", [chat_record("q", chat_response("a"), instance=1),
                                       chat_record("q", chat_response("b"), instance=2)])
    report = json.loads(run("inspect", tmp_path, "--json").stdout)
    assert report["models"]["test/model"]["ambiguous_prompts"] == 1


def test_inspect_exit_status_on_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(chat_record("q", chat_response("a")).to_json()) + b"\n{x\n")
    stopped = run("inspect", path)
    assert stopped.returncode == 2 and f"{path}:2: not valid JSON" in stopped.stderr
    skipped = run("inspect", path, "--skip-bad-lines")
    assert skipped.returncode == 1 and f"bad line: {path}:2" in skipped.stdout


def test_convert_writes_one_file_that_replays_identically(tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    result = run("convert", *SAVED, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "wrote 11 records" in result.stderr
    original = load(SAVED, progress=False).index
    converted = load([out], progress=False).index
    assert converted.models == original.models


def test_convert_refuses_to_overwrite_an_input(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [chat_record("q", chat_response("a"))])
    before = path.read_bytes()
    result = run("convert", path, "-o", path)
    assert result.returncode == 2 and "is one of the inputs" in result.stderr
    assert path.read_bytes() == before


def test_inspect_and_convert_keep_recorded_tokenizer_answers(tmp_path: Path) -> None:
    saved = write_jsonl(tmp_path / "r.jsonl", [
        chat_record("q", chat_response("a")),
        tokenizer_record("/tokenize", {"prompt": "Hi"},
                         {"count": 1, "max_model_len": 64, "tokens": [3]}, line=2),
        tokenizer_record("/detokenize", {"tokens": [3]}, {"prompt": "Hi"}, line=3),
        tokenizer_record("/detokenize", {"tokens": [3]}, {"prompt": "Ho"}, line=4)])
    report = json.loads(run("inspect", saved, "--json").stdout)["models"]["test/model"]
    assert (report["records"], report["tokenizer_answers"], report["tokenizer_conflicts"],
            report["max_model_len"]) == (1, 1, 1, 64)
    assert "recorded tokenizer answers: 1, 1 request(s) recorded with different answers" \
        in run("inspect", saved).stdout
    out = tmp_path / "all.jsonl"
    assert run("convert", saved, "-o", out).returncode == 0
    assert load([out], progress=False).index.models == load([saved], progress=False).index.models
