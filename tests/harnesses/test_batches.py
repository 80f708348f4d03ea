"""Batch jobs rescored for real (issue 32): the openai SDK (`files.create`, `batches.create`,
`retrieve` until it ends, `files.content`), the anthropic SDK (`messages.batches.create`,
`retrieve`, `results`) and inspect_ai's `--batch` with an `openai/` and an `anthropic/`
model, each recorded through `replay-server record` in front of the fake model's batch
APIs and rescored under `replay-server run` with the same results (inspect: still with
`--batch`, the replay's batch endpoints answering), exit 0; a changed prompt in one line
fails `run` (exit 3), the line errored."""

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

# one worker runs this module (make test: --dist loadgroup): its fake model is made once
pytestmark = [pytest.mark.harness, pytest.mark.http, pytest.mark.slow,
              pytest.mark.xdist_group("batches")]
GPT, CLAUDE = "tiny-model", "claude-fake"
RUN_PRINTED = r"^replay-server run:|^  (model|miss) |^(LINE|accuracy) "

# A harness's batch rescoring with the openai SDK: upload, create, poll, download both
# files; argv[1] is appended to the last question (a changed prompt).
OPENAI_SDK = """
import io, json, sys, time, openai
client = openai.OpenAI()
questions = ["What is 2 + 3?", "What is 4 * 5?", "What is 9 - 7?" + sys.argv[1]]
lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
          "body": {"model": "MODEL", "temperature": 0,
                   "messages": [{"role": "user", "content": q}]}}
         for i, q in enumerate(questions)]
data = "".join(json.dumps(line) + "\\n" for line in lines).encode()
uploaded = client.files.create(file=("questions.jsonl", io.BytesIO(data)), purpose="batch")
batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
while batch.status not in ("completed", "failed", "expired", "cancelled"):
    time.sleep(0.1)
    batch = client.batches.retrieve(batch.id)
results = []
for file_id in (batch.output_file_id, batch.error_file_id):
    if file_id:
        results += [json.loads(x) for x in client.files.content(file_id).text.splitlines()]
for got in sorted(results, key=lambda got: got["custom_id"]):
    body = got["response"]["body"]
    said = body["choices"][0]["message"]["content"] if got["response"]["status_code"] == 200 \\
        else "errored " + body["error"]["code"]
    print("LINE", got["custom_id"], said)
""".replace("MODEL", GPT)

ANTHROPIC_SDK = """
import sys, time, anthropic
client = anthropic.Anthropic()
questions = ["What is 2 + 3?", "What is 4 * 5?", "What is 9 - 7?" + sys.argv[1]]
batch = client.messages.batches.create(requests=[
    {"custom_id": f"q{i}", "params": {"model": "MODEL", "max_tokens": 64, "temperature": 0,
                                      "messages": [{"role": "user", "content": q}]}}
    for i, q in enumerate(questions)])
while batch.processing_status != "ended":
    time.sleep(0.1)
    batch = client.messages.batches.retrieve(batch.id)
for got in sorted(client.messages.batches.results(batch.id), key=lambda got: got.custom_id):
    said = got.result.message.content[0].text if got.result.type == "succeeded" \\
        else f"{got.result.type} {got.result.error.error.message}"
    print("LINE", got.custom_id, said)
""".replace("MODEL", CLAUDE)


class Batches:
    """The workspace: task files, an offline environment, the fake's batch APIs."""

    def __init__(self, root: Path, fake: str) -> None:
        self.dir, self.fake = root, fake
        self.env = {k: v for k, v in offline_env(root).items()
                    if not k.startswith("ANTHROPIC_")}
        self.tasks = root / "tasks"


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Batches]:
    root = tmp_path_factory.mktemp("batches")
    shutil.copytree(ROOT / "tests" / "data" / "gen" / "tasks", root / "tasks")
    (root / "batch.json").write_text(json.dumps({"size": 10, "send_delay": 0.2, "tick": 0.2}))
    with running(fake_model([GPT, CLAUDE])) as url:
        yield Batches(root, url.removesuffix("/v1"))


def recorded(batches: Batches, name: str, command: list[str], cwd: Path) -> tuple[Path, str]:
    """`command` run once through the recorder, every SDK's variable at it."""
    recording = batches.dir / (re.sub(r"\W+", "-", name) + ".jsonl")
    with service("record", "--upstream", batches.fake, "--out", str(recording)) as rec:
        root = rec.url.removesuffix("/v1")
        ran = run(f"{name}: original run, recorded", command, {
            **batches.env, "OPENAI_BASE_URL": rec.url, "ANTHROPIC_BASE_URL": root,
            "ANTHROPIC_API_KEY": "sk-ant-test"}, cwd, RUN_PRINTED)
    assert ran.code == 0, ran.output[-3000:] + "".join(rec.lines)
    assert "batch lines whose results never came through" not in "".join(rec.lines)
    saved = [json.loads(line) for line in recording.read_text().splitlines()]
    assert saved and all("custom_id" in r["source"] for r in saved)  # each a batch's line
    return recording, ran.output


def under_run(batches: Batches, name: str, saved: Path, command: list[str],
              cwd: Path) -> tuple[int, str]:
    ran = run(f"{name}: rescored", [*REPLAY, "run", str(saved), "--", *command],
              batches.env, cwd, RUN_PRINTED)
    return ran.code, ran.output


def printed(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("LINE ")]


@pytest.mark.parametrize(("name", "script"), [("the openai SDK", OPENAI_SDK),
                                              ("the anthropic SDK", ANTHROPIC_SDK)])
def test_an_sdk_batch_rescored_under_run_gives_the_same_results_and_a_changed_line_exits_3(
        batches: Batches, name: str, script: str) -> None:
    command = [sys.executable, "-c", script]
    recording, output = recorded(batches, name, [*command, ""], batches.dir)
    original = printed(output)
    assert len(original) == 3 and not any("errored" in line for line in original), output
    lines = recording.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["response"] for x in lines)
    code, replayed = under_run(batches, name, recording, [*command, ""], batches.dir)
    assert code == 0, replayed[-3000:]
    assert printed(replayed) == original
    code, changed = under_run(batches, f"{name}, a changed prompt", recording,
                              [*command, " "], batches.dir)
    assert code == 3, changed[-3000:]
    assert printed(changed)[:2] == original[:2]
    assert re.match(r"LINE q2 errored.* replay_no_match", printed(changed)[2]), changed[-3000:]
    assert "1 distinct request(s) got no saved generation" in changed


# --------------------------------------------------------------------------- inspect_ai

INSPECT = {"openai/": [f"openai/{GPT}", "-M", "responses_api=false"],
           "anthropic/": [f"anthropic/{CLAUDE}"]}


def inspect_command(batches: Batches, log_dir: Path, model: list[str]) -> list[str]:
    """inspect_arith with `--batch`, polling every 0.2 s (a BatchConfig file)."""
    return [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model", *model,
            "--batch", str(batches.dir / "batch.json"), "--temperature", "0",
            "--log-dir", str(log_dir), "--display", "plain"]


def changed_tasks(batches: Batches) -> Path:
    """The tasks with one sample's question changed by a space (a changed prompt)."""
    tasks = batches.dir / "tasks-changed"
    if not tasks.exists():
        shutil.copytree(batches.tasks, tasks)
        data = tasks / "inspect_arith.jsonl"
        first, *rest = data.read_text().splitlines()
        sample = json.loads(first)
        assert isinstance(sample["input"], str)
        sample["input"] += " "
        data.write_text("\n".join([json.dumps(sample), *rest]) + "\n")
    return tasks


@pytest.mark.parametrize("provider", list(INSPECT))
def test_inspect_batch_rescored_under_run_with_batch_scores_the_same(
        batches: Batches, provider: str) -> None:
    name = f"inspect_ai --batch {provider}"
    out = batches.dir / re.sub(r"\W+", "-", provider)
    recording, output = recorded(batches, name, inspect_command(
        batches, out / "original", INSPECT[provider]), batches.tasks)
    original = inspect_runs.read_scores(out / "original", output)
    assert original.status == "success" and 0 < original.metrics["includes/accuracy"] < 1
    code, output = under_run(batches, name, recording, inspect_command(
        batches, out / "rescored", INSPECT[provider]), batches.tasks)
    assert code == 0, output[-3000:]
    replayed = inspect_runs.read_scores(out / "rescored", output)
    assert replayed.metrics == original.metrics and replayed.samples == original.samples
    code, output = under_run(batches, f"{name}, a changed prompt", recording, inspect_command(
        batches, out / "changed", INSPECT[provider]), changed_tasks(batches))
    assert code == 3, output[-3000:]
