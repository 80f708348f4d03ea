"""compare on what real harnesses wrote, rescoring under `replay-server run`: lm-eval
rescoring its own run (certified; then with another answer filter: the flips), inspect_ai
rescoring lm-eval's run through a port (paired through the report; then a drifted port:
nothing paired), and docs/compare.md's port-certification recipe, command for command.

The harnesses answer from the fake model (tests/fakemodel) in the original runs and from
replay-server in the rescorings; their commands are those of tests/harness/."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay_server.commands.compare import certify
from tests.fakemodel.server import create_app as fake_model
from tests.harnesses import inspect_runs, lm_eval_runs
from tests.harnesses.commands import BIN, MODEL, REPLAY, ROOT, Ran, offline_env, run
from tests.harnesses.lm_eval_runs import BASE, PORT_CASE, under_run
from tests.support import running

from .support import docs_block

# one worker runs this module (make test: --dist loadgroup), so that its module fixtures,
# the original runs, are made once
pytestmark = [pytest.mark.harness, pytest.mark.http, pytest.mark.xdist_group("compare")]
TASKS = ROOT / "tests" / "data" / "gen" / "tasks"
TASK = PORT_CASE.task  # arith_chat_greedy: lm-eval's side of the port
FILTER = 'regex_pattern: "The answer is (\\\\-?[0-9]+)"'  # as the task's YAML writes it


@dataclass
class Workspace:
    dir: Path
    env: dict[str, str]
    fake: str  # the fake model's /v1 URL

    @property
    def tasks(self) -> Path:
        return self.dir / "tasks"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("compare-harnesses")
    shutil.copytree(TASKS, root / "tasks")
    shutil.copytree(TASKS.parent / "tokenizer", root / "tokenizer")
    app = fake_model([MODEL], None, str(root / "tokenizer" / "tokenizer.json"))
    env = offline_env(root)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # replay-server, lm_eval, inspect
    with running(app) as url:
        yield Workspace(root, env, url)


@pytest.fixture(scope="module")
def original(ws: Workspace) -> lm_eval_runs.Scores:
    """lm-eval's run of the chat task against the fake model, samples saved."""
    out = ws.dir / "lm_eval-original"
    ran = run("compare: lm-eval's original run", PORT_CASE.command(ws.fake, out), ws.env,
              ws.tasks)
    assert ran.code == 0, ran.output[-3000:]
    scores = lm_eval_runs.read_scores(out, TASK, ran.output)
    right = [s["exact_match"] for s in scores.samples]
    assert 0 < sum(right) < len(right)  # some verdicts of each kind
    return scores


def compare(ws: Workspace, *args: str | Path) -> Ran:
    return run("compare", [*REPLAY, "compare", *map(str, args)], ws.env, ws.dir,
               printed=r"^(certified|NOT certified|  \S)")


def rescore_lm_eval(ws: Workspace, original: Path, label: str, tasks: Path) -> Path:
    out = ws.dir / f"lm_eval-{label}"
    ran = run(f"compare: lm-eval rescoring its own run ({label})",
              [*REPLAY, "run", str(original), "--", *under_run(PORT_CASE.command(BASE, out))],
              ws.env, tasks)
    assert ran.code == 0, ran.output[-3000:]
    return out


def test_lm_eval_rescoring_its_own_run_is_certified(ws: Workspace,
                                                    original: lm_eval_runs.Scores) -> None:
    rescored = rescore_lm_eval(ws, original.dir, "same", ws.tasks)
    done = compare(ws, original.dir, rescored)
    assert done.code == 0, done.output
    assert done.output.splitlines()[-1] == (
        "certified: all 6 paired verdicts agree, nothing unpaired")


def test_lm_eval_rescoring_with_another_answer_filter_lists_the_flips(
        ws: Workspace, original: lm_eval_runs.Scores) -> None:
    """The same task with a filter that keeps only the first digit of the answer: every
    right answer (all have two digits) becomes wrong; the wrong ones stay wrong."""
    changed = ws.dir / "first-digit"
    changed.mkdir()
    for name in ("arith.jsonl", "arith_train.jsonl", "arith_data.py"):  # the data, its loader
        shutil.copy(ws.tasks / name, changed / name)
    task = (ws.tasks / f"{TASK}.yaml").read_text()
    assert task.count(FILTER) == 1
    (changed / f"{TASK}.yaml").write_text(task.replace(FILTER, FILTER.replace("+", "")))
    rescored = rescore_lm_eval(ws, original.dir, "first-digit", changed)
    done = compare(ws, original.dir, rescored, "--json")
    assert done.code == 1, done.output
    [row] = json.loads(done.output)["rows"]
    right = {str(s["doc_id"]): s for s in original.samples if s["exact_match"] == 1.0}
    [samples] = original.dir.glob(f"*/samples_{TASK}_*.jsonl")
    lines = {str(json.loads(line)["doc_id"]): n
             for n, line in enumerate(samples.read_text().splitlines(), 1)}
    assert (row["paired"], row["agree"]) == (6, 6 - len(right))
    assert {f["instance"]: (f["original"], f["rescored"], f["original_where"])
            for f in row["flips"]} == {d: (1.0, 0.0, f"{samples}:{lines[d]}") for d in right}
    assert [f["rescored_answer"] for f in row["flips"]] == [
        right[d]["filtered_resps"][0][0] for d in sorted(right, key=int)]
    assert row["p_value"] == 2 * 0.5 ** len(right)  # every discordant pair one way


def rescore_with_the_port(ws: Workspace, original: Path, label: str, answer: str
                          ) -> tuple[Ran, Path, Path]:
    logs, report = ws.dir / f"port-{label}", ws.dir / f"port-{label}.jsonl"
    command = inspect_runs.command(logs)
    command[command.index("inspect_arith.py")] = "port_arith.py"
    line = (f'PORT_ANSWER="{answer}" FAKE_BASE_URL="$OPENAI_BASE_URL" FAKE_API_KEY=x '
            + shlex.join(command))
    ran = run(f"compare: inspect_ai rescoring lm-eval's run ({label})",
              [*REPLAY, "run", str(original), "--report", str(report), "--", "sh", "-c",
               line], ws.env, ws.tasks)
    return ran, logs, report


def test_inspect_ai_rescoring_lm_eval_pairs_through_the_report(
        ws: Workspace, original: lm_eval_runs.Scores) -> None:
    ran, logs, report = rescore_with_the_port(ws, original.dir, "same", "Answer:")
    assert ran.code == 0, ran.output[-3000:]
    done = compare(ws, original.dir, logs, "--report", report,
                   "--metric", "exact_match,strict=pattern")
    assert done.code == 0, done.output
    assert "paired by the run report: 6 pairs" in done.output
    outcome = certify(str(original.dir), str(logs), report=report,
                      metrics=["exact_match,strict=pattern"])
    docs = {str(s["doc_id"]): s["doc"]["id"] for s in original.samples}
    # lm-eval's doc N is the port's sample with that doc's id, found through the report
    assert sorted((docs[p.original.instance], p.rescored.instance)
                  for p in outcome.pairing.pairs) == [(i, f"{i} (epoch 1)")
                                                      for i in sorted(docs.values())]
    assert all(p.served is not None and f"({TASK}:{p.original.instance})" in p.served
               for p in outcome.pairing.pairs)


def test_a_drifted_port_pairs_nothing_and_says_why(ws: Workspace,
                                                   original: lm_eval_runs.Scores) -> None:
    ran, logs, report = rescore_with_the_port(ws, original.dir, "drifted", "Answer: ")
    assert ran.code == 3, ran.output[-3000:]  # inspect_ai exits 0; `run` fails it
    done = compare(ws, original.dir, logs, "--report", report, "--json")
    assert done.code == 1, done.output
    data = json.loads(done.output)
    assert data["pairs"] == 0 and len(data["unpaired"]) == 12
    assert {u["reason"] for u in data["unpaired"] if u["side"] == "rescored"} == {
        "its request got no saved generation (replay_no_match)"}


def test_the_docs_port_certification_recipe_runs_as_written(ws: Workspace) -> None:
    here = ws.dir / "recipe"
    shutil.copytree(TASKS, here)
    script = docs_block("recipe", "port-certification")
    done = subprocess.run(["sh", "-e", "-c", script], cwd=here, capture_output=True,
                          text=True, timeout=900, env={**ws.env, "MODEL_URL": ws.fake})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.endswith(docs_block("output", "port-certification"))
    assert (here / "certificate.html").read_text().count('class="flip"') == 0
