"""Claude runs rescored with real harnesses (issue 24): inspect_ai with an `anthropic/` model
and extended thinking on (so it streams by itself), lm-eval's `anthropic-chat`, LiteLLM's
`anthropic/` and the anthropic SDK, each recorded through `replay-server record` in front
of the fake model's Anthropic-shaped server and rescored under `replay-server run` with
the same answers; inspect's own log is served as it is; a changed prompt is a 400 the
client does not retry, and `run` exits 3."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakemodel.server import create_app as fake_model
from tests.harnesses import inspect_runs, lm_eval_runs
from tests.harnesses.commands import BIN, REPLAY, ROOT, offline_env, run, service
from tests.support import running

# one worker runs this module (make test: --dist loadgroup), so that its module fixtures,
# the original runs, are made once
pytestmark = [pytest.mark.harness, pytest.mark.http, pytest.mark.xdist_group("anthropic")]
GEN = ROOT / "tests" / "data" / "gen"
CLAUDE = "claude-fake"
RUN_PRINTED = r"^\||^replay-server run:|^  (model|miss) |^\s*(accuracy|stderr) "


class Claude:
    """The workspace: task files, an offline environment, the Anthropic-shaped fake."""

    def __init__(self, root: Path, fake: str) -> None:
        self.dir, self.fake = root, fake
        self.env = {k: v for k, v in offline_env(root).items()
                    if not k.startswith("ANTHROPIC_")}
        self.tasks = root / "tasks"


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Claude]:
    root = tmp_path_factory.mktemp("claude")
    shutil.copytree(GEN / "tasks", root / "tasks")
    with running(fake_model([CLAUDE])) as url:
        yield Claude(root, url.removesuffix("/v1"))


def recorded(claude: Claude, name: str, command: list[str], printed: str) -> tuple[Path, str]:
    """`command` run once through the recorder, with Anthropic's variables at it."""
    recording = claude.dir / (re.sub(r"\W+", "-", name) + ".jsonl")
    with service("record", "--upstream", claude.fake, "--out", str(recording)) as rec:
        root = rec.url.removesuffix("/v1")
        ran = run(f"{name}: original run, recorded", [
            a.replace("{root}", root) for a in command],
            {**claude.env, "ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_BASE": root,
             "ANTHROPIC_API_KEY": "sk-ant-test"}, claude.tasks, printed)
    assert ran.code == 0, ran.output[-3000:] + "".join(rec.lines)
    return recording, ran.output


def under_run(claude: Claude, name: str, saved: Path, command: list[str],
              stale: dict[str, str] | None = None) -> tuple[int, str]:
    """`replay-server run SAVED -- COMMAND` (`{root}` in it: the replay's root URL), with
    the `stale` variables in the environment `run` inherits."""
    line = " ".join(f'"{a.replace("{root}", "$ANTHROPIC_BASE_URL")}"' if "{root}" in a
                    else shlex.quote(a) for a in command)
    ran = run(f"{name}: rescored", [*REPLAY, "run", str(saved), "--", "sh", "-c", line],
              {**claude.env, **(stale or {})}, claude.tasks, RUN_PRINTED)
    return ran.code, ran.output


# --------------------------------------------------------------------------- inspect_ai

# a name inspect knows supports a thinking budget (the fake answers any name)
INSPECT_MODEL = "anthropic/claude-sonnet-4-5"


def inspect_command(log_dir: Path) -> list[str]:
    """inspect_arith with extended thinking on: inspect's anthropic provider then streams.
    It reads ANTHROPIC_BASE_URL, as a user runs it: no `--model-base-url`."""
    return [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model", INSPECT_MODEL,
            "--log-dir", str(log_dir),
            "--reasoning-tokens", "1024", "--max-tokens", "2048", "--display", "plain"]


PRINTED = rf"^\s*(accuracy|stderr|{INSPECT_MODEL}) "


@pytest.fixture(scope="module")
def inspect_original(claude: Claude) -> tuple[Path, inspect_runs.Scores]:
    recording, output = recorded(claude, "inspect_ai anthropic/",
                                 inspect_command(claude.dir / "inspect-original"), PRINTED)
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    calls = [r for r in lines if r["endpoint"] == "/v1/messages"]
    assert calls and all("stream" in r for r in calls), [r["endpoint"] for r in lines]
    return recording, inspect_runs.read_scores(claude.dir / "inspect-original", output)


def same_inspect(replayed: inspect_runs.Scores, original: inspect_runs.Scores) -> None:
    assert replayed.status == original.status == "success"
    assert replayed.metrics == original.metrics
    assert replayed.samples == original.samples
    assert 0 < original.metrics["includes/accuracy"] < 1


@pytest.mark.parametrize("source", ["recording", "log"])
def test_inspect_anthropic_rescored_under_run_scores_the_same(
        claude: Claude, inspect_original: tuple[Path, inspect_runs.Scores], source: str) -> None:
    """From the recording (its frames replayed byte for byte), and from the .eval log
    inspect wrote itself (its Messages calls read by the inspect reader). A stale
    INSPECT_EVAL_MODEL_BASE_URL (inspect's `--model-base-url`, which beats
    ANTHROPIC_BASE_URL) is removed by `run`."""
    recording, original = inspect_original
    saved = recording if source == "recording" else original.log
    out = claude.dir / f"inspect-from-{source}"
    code, output = under_run(claude, f"inspect_ai anthropic/ from the {source}", saved,
                             inspect_command(out),
                             {"INSPECT_EVAL_MODEL_BASE_URL": "http://127.0.0.1:9/v1"})
    same_inspect(inspect_runs.read_scores(out, output), original)
    if source == "recording":
        assert code == 0, output[-3000:]
        return
    # inspect's log keeps no count_tokens call (its compaction counts tokens): those are
    # token counts, not generations, unanswered tokenizer calls that `run` reports loudly
    # and fails on only with --strict; every generation was served from the log
    assert code == 0, output[-3000:]
    assert re.search(r"WARNING: \d+ tokenizer call\(s\) went unanswered", output), output
    assert "x /v1/messages/count_tokens: no saved count_tokens answer" in output, output
    assert "replay_no_match" not in output, output


# --------------------------------------------------------------------------- lm-eval

def lm_eval_command(out: Path, system: str = lm_eval_runs.SYSTEM) -> list[str]:
    args = f"model={CLAUDE},base_url={{root}}/v1/messages,max_retries=1"
    return [str(BIN / "lm_eval"), "run", "--model", "anthropic-chat", "--model_args", args,
            "--tasks", "arith_chat_greedy", "--include_path", ".", "--output_path", str(out),
            "--log_samples", "--apply_chat_template", "--system_instruction", system]


# `run`'s verdict on misses: distinct requests, and the attempts at them (a retry is one more)
MISSES = re.compile(r"(\d+) distinct request\(s\) got no saved generation \((\d+) attempt")


def test_lm_eval_anthropic_chat_rescored_under_run_scores_the_same(claude: Claude) -> None:
    recording, output = recorded(claude, "lm-eval anthropic-chat",
                                 lm_eval_command(claude.dir / "lm-original"), r"^\|")
    original = lm_eval_runs.read_scores(claude.dir / "lm-original", "arith_chat_greedy", output)
    code, output = under_run(claude, "lm-eval anthropic-chat", recording,
                             lm_eval_command(claude.dir / "lm-rescored"))
    assert code == 0, output[-3000:]
    replayed = lm_eval_runs.read_scores(claude.dir / "lm-rescored", "arith_chat_greedy", output)
    assert replayed.results == original.results
    assert replayed.per_doc() == original.per_doc()
    # another system prompt: every request a miss, none sent twice, and `run` exits 3
    code, missed = under_run(claude, "lm-eval anthropic-chat, a changed prompt", recording,
                             lm_eval_command(claude.dir / "lm-changed", lm_eval_runs.SYSTEM + "!"))
    assert code == 3, missed[-3000:]
    found = MISSES.search(missed)
    assert found and found.group(1) == found.group(2), missed[-3000:]


# --------------------------------------------------------------------------- LiteLLM, the SDK

LITELLM = """
import litellm, sys
for q in ("What is 2 + 3?", "What is 7 - 4?"):
    r = litellm.completion(model="anthropic/MODEL", max_tokens=64, num_retries=0,
                           messages=[{"role": "user", "content": q + sys.argv[1]}])
    print("ANSWER", r.choices[0].message.content, r.usage.prompt_tokens)
""".replace("MODEL", CLAUDE)

SDK = """
import anthropic, sys
client = anthropic.Anthropic(max_retries=2)
with client.messages.stream(model="MODEL", max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "What is 8 + 9?" + sys.argv[1]}]) as s:
    m = s.get_final_message()
print("ANSWER", m.to_json(indent=None))
print("COUNT", client.messages.count_tokens(model="MODEL", messages=[
    {"role": "user", "content": "What is 8 + 9?"}]).input_tokens)
""".replace("MODEL", CLAUDE)


@pytest.mark.parametrize("name, script", [("LiteLLM anthropic/", LITELLM),
                                          ("the anthropic SDK", SDK)])
def test_a_client_rescored_under_run_answers_the_same_and_a_changed_prompt_exits_3(
        claude: Claude, name: str, script: str) -> None:
    command = [sys.executable, "-c", script]
    recording, output = recorded(claude, name, [*command, ""], r"^(ANSWER|COUNT) ")
    answers = [line for line in output.splitlines() if line.startswith(("ANSWER", "COUNT"))]
    assert answers
    code, replayed = under_run(claude, name, recording, [*command, ""])
    assert code == 0, replayed[-3000:]
    assert [line for line in replayed.splitlines()
            if line.startswith(("ANSWER", "COUNT"))] == answers
    code, missed = under_run(claude, f"{name}, a changed prompt", recording, [*command, "!"])
    assert code == 3, missed[-3000:]
    assert "replay_no_match" in missed
    assert missed.count("replay error replay_no_match") == 1, "the client did not retry"
