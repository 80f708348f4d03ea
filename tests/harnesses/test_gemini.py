"""Gemini runs rescored with real harnesses (issue 31 items 7 and 9): inspect_ai with a
`google/` model (thinking on, streamed and not), its own `.eval` log served by the inspect
reader; and LiteLLM's `gemini/` models (sync, streamed, async), recorded through `replay-server
record` in front of the fake model's Gemini-shaped server. Each rescored under `replay-server
run` with the same answers and scores; a changed prompt is a 400 the client does not retry,
and `run` exits 3 (inspect scores the failed call as an error and goes on)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakemodel.server import create_app as fake_model
from tests.harnesses import inspect_runs
from tests.harnesses.commands import BIN, REPLAY, ROOT, offline_env, run, service
from tests.support import running

# one worker runs this module (make test: --dist loadgroup), so that its module fixtures,
# the original runs, are made once
pytestmark = [pytest.mark.harness, pytest.mark.http, pytest.mark.slow,
              pytest.mark.xdist_group("gemini")]
GEN = ROOT / "tests" / "data" / "gen"
RUN_PRINTED = r"^replay-server run:|^  (model|miss) |^\s*(accuracy|stderr) "
# `run`'s verdict on misses: distinct requests, and the attempts at them (a retry is one more)
MISSES = re.compile(r"(\d+) distinct request\(s\) got no saved generation \((\d+) attempt")


class Workspace:
    """Task files, an offline environment without Google's variables, the Gemini fake."""

    def __init__(self, root: Path, fake: str) -> None:
        self.dir, self.fake = root, fake
        self.env = {k: v for k, v in offline_env(root).items()
                    if not k.startswith(("GOOGLE_", "GEMINI_", "VERTEX"))}
        self.tasks = root / "tasks"


@pytest.fixture(scope="module")
def gemini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("gemini")
    shutil.copytree(GEN / "tasks", root / "tasks")
    with running(fake_model(None)) as url:  # it answers any gemini-* name
        yield Workspace(root, url.removesuffix("/v1"))


def under_run(ws: Workspace, name: str, saved: Path, command: list[str], cwd: Path,
              *options: str) -> tuple[int, str]:
    """`replay-server run [OPTIONS] SAVED -- COMMAND`, with only the variables `run` sets
    pointing anywhere."""
    ran = run(f"{name}: rescored", [*REPLAY, "run", *options, str(saved), "--", *command],
              ws.env, cwd, RUN_PRINTED)
    return ran.code, ran.output


def not_retried(output: str) -> None:
    found = MISSES.search(output)
    assert found and found.group(1) == found.group(2), output[-3000:]


# --------------------------------------------------------------------------- inspect_ai

INSPECT_MODEL = "google/gemini-2.5-flash"  # a name inspect thinks for (the fake answers it)
PRINTED = rf"^\s*(accuracy|stderr|{INSPECT_MODEL}) "


def inspect_command(log_dir: Path, streaming: str, *extra: str) -> list[str]:
    """inspect_arith (a dialogue, the calculator tool) with a gemini-2.5 model: thinking
    on. It reads GOOGLE_BASE_URL and GOOGLE_API_KEY, as a user runs it."""
    return [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model", INSPECT_MODEL,
            "-M", f"streaming={streaming}", "--temperature", "0", "--display", "plain",
            "--log-dir", str(log_dir), *extra]


@pytest.fixture(scope="module", params=["false", "true"], ids=["plain", "streamed"])
def inspect_original(gemini: Workspace, request: pytest.FixtureRequest
                     ) -> tuple[str, inspect_runs.Scores]:
    """inspect's own run against the fake, and its log."""
    streaming: str = request.param
    out = gemini.dir / f"inspect-original-{streaming}"
    ran = run(f"inspect_ai google/ (streaming={streaming}): original run",
              inspect_command(out, streaming),
              {**gemini.env, "GOOGLE_BASE_URL": gemini.fake, "GOOGLE_API_KEY": "any-key"},
              gemini.tasks, PRINTED)
    assert ran.code == 0, ran.output[-3000:]
    scores = inspect_runs.read_scores(out, ran.output)
    assert scores.status == "success" and 0 < scores.metrics["includes/accuracy"] < 1
    return streaming, scores


def test_inspect_google_rescored_from_its_log_scores_the_same(
        gemini: Workspace, inspect_original: tuple[str, inspect_runs.Scores]) -> None:
    streaming, original = inspect_original
    out = gemini.dir / f"inspect-whole-{streaming}"
    code, output = under_run(gemini, f"inspect_ai google/ (streaming={streaming}), whole",
                             original.log, inspect_command(out, streaming), gemini.tasks)
    replayed = inspect_runs.read_scores(out, output)
    assert replayed.samples == original.samples and replayed.metrics == original.metrics
    assert code == 0, output[-3000:]


def test_inspect_google_with_a_changed_prompt_exits_3(
        gemini: Workspace, inspect_original: tuple[str, inspect_runs.Scores]) -> None:
    """Another system message: every call a 400 that inspect does not retry; inspect
    scores the samples as errors, and `run` exits 3."""
    streaming, original = inspect_original
    changed = gemini.dir / f"tasks-changed-{streaming}"
    shutil.copytree(gemini.tasks, changed)
    task = changed / "inspect_arith.py"
    task.write_text(task.read_text().replace("careful calculator.", "careful calculator!"))
    out = gemini.dir / f"inspect-changed-{streaming}"
    code, output = under_run(gemini, f"inspect_ai google/ (streaming={streaming}), a changed "
                             "system message", original.log,
                             inspect_command(out, streaming), changed)
    assert code == 3, output[-3000:]
    assert "replay_no_match" in output
    not_retried(output)


# --------------------------------------------------------------------------- LiteLLM

LITELLM = """
import asyncio, json, sys, litellm
model, changed = "gemini/gemini-fake", sys.argv[1]
def ask(question):
    return [{"role": "user", "content": question + changed}]
def said(r):
    m, u = r.choices[0].message, r.usage
    return [m.content, getattr(m, "reasoning_content", None), r.choices[0].finish_reason,
            u.prompt_tokens, u.completion_tokens]
out = {"sync": said(litellm.completion(model=model, messages=ask("What is 2 + 3?"),
                                       temperature=0))}
chunks = list(litellm.completion(model=model, messages=ask("What is 7 - 4?"), temperature=0,
                                 stream=True))
out["streamed"] = said(litellm.stream_chunk_builder(chunks))
async def thinking():
    return said(await litellm.acompletion(model=model, messages=ask("What is 6 * 7?"),
                                          reasoning_effort="low"))
out["async"] = asyncio.run(thinking())
print("ANSWER", json.dumps(out))
"""


def test_litellm_gemini_rescored_under_run_answers_the_same_and_a_changed_prompt_exits_3(
        gemini: Workspace) -> None:
    """Recorded once through `record` (LiteLLM reads GEMINI_API_BASE, the versioned root,
    and GEMINI_API_KEY), replayed under `run` (which sets them): the same answers, reasoning
    and usage; a changed prompt is one attempt per request, and exit 3."""
    command = [sys.executable, "-c", LITELLM]
    recording = gemini.dir / "litellm-gemini.jsonl"
    with service("record", "--upstream", gemini.fake, "--out", str(recording)) as rec:
        root = rec.url.removesuffix("/v1")
        ran = run("LiteLLM gemini/: original run, recorded", [*command, ""],
                  {**gemini.env, "GEMINI_API_BASE": root + "/v1beta",
                   "GEMINI_API_KEY": "any-key"}, gemini.dir, r"^ANSWER ")
    assert ran.code == 0, ran.output[-3000:] + "".join(rec.lines)
    saved = [json.loads(line) for line in recording.read_text().splitlines()]
    assert len(saved) == 3 and sum("stream" in r for r in saved) == 1
    answers = [line for line in ran.output.splitlines() if line.startswith("ANSWER ")]
    assert len(answers) == 1 and json.loads(answers[0][7:])["async"][1]  # it thought
    code, replayed = under_run(gemini, "LiteLLM gemini/", recording, [*command, ""],
                               gemini.dir)
    assert code == 0, replayed[-3000:]
    assert [line for line in replayed.splitlines() if line.startswith("ANSWER ")] == answers
    code, missed = under_run(gemini, "LiteLLM gemini/, a changed prompt", recording,
                             [*command, "!"], gemini.dir)
    assert code == 3, missed[-3000:]
    assert "replay_no_match" in missed
    not_retried(missed)
