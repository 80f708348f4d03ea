"""The judge recipes of docs/judges.md, run for real under `replay-server run`: the
candidate replayed from a saved run, the judge a local stand-in (tests/fakemodel grades
inspect_ai's model-graded template), live and saved in pass 1, replayed in pass 2; both
passes give the same per-sample judge scores."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakemodel.server import create_app as fake_model
from tests.harnesses import inspect_runs
from tests.harnesses.commands import BIN, DEEPEVAL, REPLAY, ROOT, offline_env, run
from tests.support import chat_record, chat_response, running, venv_python, write_jsonl

pytestmark = [pytest.mark.harness, pytest.mark.http]
SAVED = ROOT / "tests" / "data" / "inspect_ai" / "arith"  # inspect_arith, as inspect logged it
JUDGE = "judge-model"
CANDIDATE = "tiny-model"
PRINTED = r"^replay-server run:|^  model |^\s*(accuracy|stderr) "


@dataclass
class Bench:
    dir: Path
    env: dict[str, str]
    judge: str  # the stand-in judge's /v1 URL
    wire: Path  # what the judge was asked, one JSON line per request


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    root = tmp_path_factory.mktemp("judges")
    shutil.copytree(ROOT / "tests" / "data" / "gen" / "tasks", root / "tasks")
    wire = root / "judge-wire.jsonl"
    with running(fake_model([JUDGE], str(wire))) as url:
        yield Bench(root, offline_env(root), url, wire)


def inspect_judged(bench: Bench, label: str, *run_options: str, grader: str = JUDGE,
                   role: bool = True) -> tuple[int, str, inspect_runs.Scores | None]:
    """`replay-server run SAVED RUN_OPTIONS -- inspect eval inspect_judge.py` with the
    grader as a model role (or the scorer's `model=`): exit status, output, scores."""
    log_dir = bench.dir / f"inspect-{label}"
    grading = ["--model-role", f"grader=openai-api/fake/{grader}"] if role \
        else ["-T", f"grader=openai-api/fake/{grader}"]
    command = [str(BIN / "inspect"), "eval", "inspect_judge.py", "--model",
               inspect_runs.PROVIDER_MODEL, *grading, "--log-dir", str(log_dir),
               "--temperature", "0", "--display", "plain"]
    ran = run(f"inspect_ai judged: {label}", [*REPLAY, "run", str(SAVED), *run_options,
                                              "--base-url-var", "FAKE_BASE_URL", "--",
                                              *command], bench.env, bench.dir / "tasks", PRINTED)
    scores = inspect_runs.read_scores(log_dir, ran.output) if log_dir.exists() else None
    return ran.code, ran.output, scores


def judge_scores(scores: inspect_runs.Scores) -> dict[str, object]:
    return {sample: score["model_graded_fact"] for sample, (_, score, _) in
            scores.samples.items()}


@pytest.mark.parametrize("role", [True, False], ids=["model-role", "scorer-model"])
def test_inspect_model_graded_scores_replay_identically_in_the_second_pass(
        bench: Bench, role: bool) -> None:
    label = "role" if role else "model-arg"
    out = bench.dir / f"judge-{label}.jsonl"
    first, output, live = inspect_judged(bench, f"{label}-live", "--upstream", bench.judge,
                                         "--out", str(out), role=role)
    assert first == 0, output[-3000:]
    assert f"model {JUDGE} (forwarded upstream, not replayed): 6 exchanges" in output
    assert live is not None and live.status == "success"
    verdicts = judge_scores(live)
    assert set(verdicts.values()) == {"C", "I"}, verdicts  # the judge tells them apart
    # the candidate's requests were all replayed: the judge saw only its own
    assert {json.loads(line)["request"]["model"]
            for line in bench.wire.read_text().splitlines()} == {JUDGE}
    second, output, replayed = inspect_judged(bench, f"{label}-replayed", str(out), role=role)
    assert second == 0, output[-3000:]
    assert "forwarded upstream" not in output
    assert replayed is not None and judge_scores(replayed) == verdicts
    assert replayed.metrics == live.metrics


def test_a_changed_judge_is_a_miss_never_the_old_verdict(bench: Bench) -> None:
    out = bench.dir / "judge-frozen.jsonl"
    first, output, _ = inspect_judged(bench, "frozen-live", "--upstream", bench.judge,
                                      "--out", str(out))
    assert first == 0, output[-3000:]
    before = bench.wire.read_text().count("\n")
    code, output, _ = inspect_judged(bench, "other-judge", str(out), grader="judge-model-2")
    assert code == 3, output[-3000:]
    assert "judge-model-2" in output and bench.wire.read_text().count("\n") == before


# --------------------------------------------------------------------------- deepeval

CANDIDATE_ANSWERS = {"What is 12 + 7?": "The answer is 19.", "What is 23 + 19?": "The answer "
                     "is 41.", "What is 9 * 8?": "The answer is 72.",
                     "What is 100 - 37?": "The answer is 64."}


def deepeval_judged(bench: Bench, saved: list[Path], *run_options: str, grader: str = JUDGE
                    ) -> tuple[int, str]:
    """`replay-server run SAVED RUN_OPTIONS -- python deepeval_geval.py CANDIDATE JUDGE`."""
    python = venv_python("deepeval-venv", DEEPEVAL)
    script = ROOT / "tests" / "harnesses" / "deepeval_geval.py"
    ran = run(f"deepeval GEval judged: {' '.join(run_options) or 'replayed'}",
              [*REPLAY, "run", *map(str, saved), *run_options, "--", python, str(script),
               CANDIDATE, grader], {**bench.env, "DEEPEVAL_TELEMETRY_OPT_OUT": "YES"},
              bench.dir, PRINTED + r"|^\{")
    return ran.code, ran.output


def geval_scores(output: str) -> dict[str, float]:
    (line,) = [line for line in output.splitlines() if line.startswith("{")]
    scores: dict[str, float] = json.loads(line)
    return scores


def test_deepeval_geval_scores_replay_identically_in_the_second_pass(bench: Bench) -> None:
    saved = write_jsonl(bench.dir / "geval-candidate.jsonl", [
        chat_record(question, chat_response(answer), model=CANDIDATE, line=i + 1)
        for i, (question, answer) in enumerate(CANDIDATE_ANSWERS.items())])
    out = bench.dir / "geval-judge.jsonl"
    first, output = deepeval_judged(bench, [saved], "--upstream", bench.judge, "--out",
                                    str(out))
    assert first == 0, output[-3000:]
    live = geval_scores(output)
    assert live == {"What is 12 + 7?": 1.0, "What is 23 + 19?": 0.0, "What is 9 * 8?": 1.0,
                    "What is 100 - 37?": 0.0}
    assert f"model {JUDGE} (forwarded upstream, not replayed): 4 exchanges" in output
    second, output = deepeval_judged(bench, [saved, out])
    assert second == 0, output[-3000:]
    assert geval_scores(output) == live and "forwarded upstream" not in output
