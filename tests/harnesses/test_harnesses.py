"""Rescoring fidelity with real harnesses, end to end: a run recorded once against the fake
model and rescored by replay-server (from the recording, and from the harness's own saved
files) reports exactly the same scores, and every replayed answer is the recorded one.

Everything runs as a user runs it: `replay-server record|serve|run` and the harnesses are
commands (tests/harnesses/commands.py keeps every command line: the recipes of docs/recipes/).
The fake model (tests/fakemodel) answers some questions right and some wrong, samples
differently per call when temperature > 0, and sends reasoning, usage and finish_reason.
"""

from __future__ import annotations

import inspect
import json
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakemodel.server import create_app as fake_model
from tests.harnesses import inspect_runs, lm_eval_runs
from tests.harnesses.commands import (
    MODEL,
    REPLAY,
    ROOT,
    Ran,
    all_hit,
    offline_env,
    run,
    service,
)
from tests.harnesses.lm_eval_runs import BASE, CASES, under_run
from tests.support import running

# one worker runs this module (make test: --dist loadgroup), so that its module fixtures,
# the original runs, are made once
pytestmark = [pytest.mark.harness, pytest.mark.http, pytest.mark.xdist_group("harnesses")]
GEN = ROOT / "tests" / "data" / "gen"
OLMO_RUN = ROOT / "tests" / "data" / "olmo_eval" / "run_basic"
RUN_PRINTED = r"^\||^replay-server run:|^  (model|skipped|rejected|miss) |^\s*(accuracy|stderr) "


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
    """Task files and tokenizer copied (harnesses may write beside them), an offline
    environment, and one fake model for the module."""
    root = tmp_path_factory.mktemp("harnesses")
    shutil.copytree(GEN / "tasks", root / "tasks")
    shutil.copytree(GEN / "tokenizer", root / "tokenizer")
    app = fake_model([MODEL], None, str(root / "tokenizer" / "tokenizer.json"))
    with running(app) as url:
        yield Workspace(root, offline_env(root), url)


# --------------------------------------------------------------------------- lm-eval


@dataclass
class Original:
    recording: Path
    scores: lm_eval_runs.Scores


@pytest.fixture(scope="module")
def lm_eval_original(ws: Workspace) -> Callable[[str], Original]:
    """Each case run once through `replay-server record` in front of the fake model."""
    done: dict[str, Original] = {}

    def original(name: str) -> Original:
        if name not in done:
            case, recording = CASES[name], ws.dir / f"lm_eval-{name}.jsonl"
            with service("record", "--upstream", ws.fake, "--out", str(recording)) as rec:
                ran = run(f"lm-eval {name}: original run, recorded", case.command(
                    rec.url, ws.dir / f"{name}-original"), ws.env, ws.tasks)
            assert ran.code == 0, ran.output[-3000:] + "".join(rec.lines)
            done[name] = Original(recording, lm_eval_runs.read_scores(
                ws.dir / f"{name}-original", case.task, ran.output))
        return done[name]
    return original


def serve_lm_eval(ws: Workspace, name: str, label: str, saved: Path) -> lm_eval_runs.Scores:
    """`replay-server serve SAVED`, then lm_eval against it; every request must hit."""
    out = ws.dir / f"{name}-{label}"
    with service("serve", str(saved)) as server:
        ran = run(f"lm-eval {name}: {label}", CASES[name].command(server.url, out), ws.env,
                  ws.tasks)
        all_hit(server.status())
    assert ran.code == 0, ran.output[-3000:]
    return lm_eval_runs.read_scores(out, CASES[name].task, ran.output)


def rescore_lm_eval(ws: Workspace, name: str, label: str, saved: Path,
                    *run_options: str) -> tuple[int, str, Path]:
    """`replay-server run SAVED -- lm_eval ...`: (exit status, output, lm-eval's output dir)."""
    out = ws.dir / f"{name}-{label}"
    command = CASES[name].command(BASE, out)
    ran = run(f"lm-eval {name}: {label}", [*REPLAY, "run", str(saved), *run_options, "--",
                                           *under_run(command)], ws.env, ws.tasks, RUN_PRINTED)
    return ran.code, ran.output, out


def assert_same_lm_eval_scores(replayed: lm_eval_runs.Scores,
                               original: lm_eval_runs.Scores) -> None:
    assert replayed.printed == original.printed  # the results table
    assert replayed.results == original.results
    assert replayed.per_doc() == original.per_doc()  # every answer, raw and filtered


@pytest.mark.parametrize("name", list(CASES))
def test_lm_eval_rescored_from_the_recording_scores_the_same(
        ws: Workspace, lm_eval_original: Callable[[str], Original], name: str) -> None:
    original = lm_eval_original(name)
    replayed = serve_lm_eval(ws, name, "replayed", original.recording)
    assert_same_lm_eval_scores(replayed, original.scores)


def test_the_fake_model_makes_the_lm_eval_cases_worth_replaying(
        lm_eval_original: Callable[[str], Original]) -> None:
    """Scores strictly between 0 and 1, and repeats that really differ."""
    for name, metric in [("chat_repeats", "exact_match,score-first"),
                         ("completions_batch", "exact_match,strict-match"),
                         ("loglikelihood_mc", "acc,none")]:
        assert 0 < lm_eval_original(name).scores.metric(metric) < 1
    resps = [r for r, _ in lm_eval_original("chat_repeats").scores.per_doc().values()]
    assert all(len(r[0]) == 3 for r in resps) and any(len(set(r[0])) > 1 for r in resps)


@pytest.mark.parametrize("name", list(CASES))
def test_lm_eval_rescored_from_its_own_samples_scores_the_same(
        ws: Workspace, lm_eval_original: Callable[[str], Original], name: str) -> None:
    """From the samples files alone; token-id prompts (tokenized_requests=True) and
    loglikelihoods (multiple choice: acc and acc_norm) with the run's tokenizer."""
    original = lm_eval_original(name)
    tokenizer = ("--tokenizer", str(ws.dir / "tokenizer")) if "tokenizer=" in \
        CASES[name].model_args else ()
    code, output, out = rescore_lm_eval(ws, name, "from-samples", original.scores.dir,
                                        *tokenizer)
    assert code == 0, output[-3000:]
    assert "every request was answered from the saved run" in output
    assert_same_lm_eval_scores(lm_eval_runs.read_scores(out, CASES[name].task, output),
                               original.scores)


def test_lm_eval_loglikelihood_from_samples_without_the_tokenizer_fails_loudly(
        ws: Workspace, lm_eval_original: Callable[[str], Original]) -> None:
    """Without the tokenizer, samples files cannot give the token ids: loud, no score."""
    original = lm_eval_original("loglikelihood_mc")
    code, output, out = rescore_lm_eval(ws, "loglikelihood_mc", "no-tokenizer",
                                        original.scores.dir)
    assert code != 0, output[-3000:]
    assert "skipped 6 row(s): loglikelihood request" in output  # said at start-up
    assert "The model `tiny-model` does not exist" in output  # lm-eval's request refused
    assert not list(out.glob("*/results_*.json"))


def test_lm_eval_perplexity_at_another_max_length_fails_run_naming_the_misses(
        ws: Workspace, lm_eval_original: Callable[[str], Original]) -> None:
    """Rescored at max_length=12, lm-eval cuts other windows than the saved run's (10):
    none is served, `run` names them and fails, and lm-eval writes no score."""
    original = lm_eval_original("perplexity")
    case = CASES["perplexity"]
    other = replace(case, model_args=case.model_args.replace("max_length=10", "max_length=12"))
    out = ws.dir / "perplexity-max-length-12"
    ran = run("lm-eval perplexity: max_length 12", [
        *REPLAY, "run", str(original.scores.dir), "--tokenizer", str(ws.dir / "tokenizer"),
        "--", *under_run(other.command(BASE, out))], ws.env, ws.tasks, RUN_PRINTED)
    assert ran.code != 0, ran.output[-3000:]
    assert "replay_no_match" in ran.output and "the prompt's token ids" in ran.output
    assert "got no saved generation" in ran.output
    assert not list(out.glob("*/results_*.json"))


def test_rewritten_answers_move_the_score_by_exactly_that_much(
        ws: Workspace, lm_eval_original: Callable[[str], Original]) -> None:
    """Set every wrong saved answer to the gold one and one right answer to a wrong one:
    the rescored exact_match moves by exactly (wrong - 1) / docs."""
    original = lm_eval_original("completions_batch")
    docs = {s["arguments"]["gen_args_0"]["arg_0"]: s for s in original.scores.samples}
    right = {p: s["exact_match"] == 1.0 for p, s in docs.items()}
    spoiled = next(p for p, ok in right.items() if ok)
    wanted = {p: 1.0 for p in right} | {spoiled: 0.0}
    lines = []
    for line in original.recording.read_text().splitlines():
        saved = json.loads(line)
        doc = docs[saved["request"]["prompt"]]
        gold = int(doc["target"]) + (1 if doc is docs[spoiled] else 0)
        saved["response"]["choices"][0]["text"] = f" The answer is {gold}."
        lines.append(json.dumps(saved))
    rewritten = ws.dir / "lm_eval-completions_batch-rewritten.jsonl"
    rewritten.write_text("\n".join(lines) + "\n")
    code, output, out = rescore_lm_eval(ws, "completions_batch", "rewritten", rewritten)
    assert code == 0, output[-3000:]
    replayed = lm_eval_runs.read_scores(out, "arith_gen", output)
    got = {s["arguments"]["gen_args_0"]["arg_0"]: s["exact_match"] for s in replayed.samples}
    assert got == wanted
    moved = (sum(not ok for ok in right.values()) - 1) / len(right)
    assert moved > 0
    assert replayed.metric("exact_match,strict-match") == pytest.approx(
        original.scores.metric("exact_match,strict-match") + moved, abs=1e-12)
    assert replayed.metric("exact_match,strict-match") == sum(wanted.values()) / len(wanted)


def test_lm_eval_against_another_tasks_run_fails_loudly(
        ws: Workspace, lm_eval_original: Callable[[str], Original]) -> None:
    """arith_gen rescored against the arith_mc recording (same model, same endpoint)."""
    wrong = lm_eval_original("loglikelihood_mc").recording
    code, output, out = rescore_lm_eval(ws, "completions_batch", "wrong-run", wrong)
    assert code != 0  # lm-eval raises on the first 400 (after its own retries)
    assert "replay_no_match" in output and "Nearest saved prompt" in output
    assert "COMMAND failed" in output
    assert not list(out.glob("*/results_*.json"))


# --------------------------------------------------------------------------- inspect_ai


@pytest.fixture(scope="module")
def inspect_original(ws: Workspace) -> tuple[Path, inspect_runs.Scores]:
    recording = ws.dir / "inspect.jsonl"
    with service("record", "--upstream", ws.fake, "--out", str(recording)) as rec:
        ran = run("inspect_ai: original run, recorded", inspect_runs.command(
            ws.dir / "inspect-original"), {**ws.env, "FAKE_BASE_URL": rec.url,
                                           "FAKE_API_KEY": "x"}, ws.tasks, inspect_runs.PRINTED)
    assert ran.code == 0, ran.output[-3000:]
    return recording, inspect_runs.read_scores(ws.dir / "inspect-original", ran.output)


def rescore_inspect(ws: Workspace, label: str, saved: Path,
                    *extra: str) -> inspect_runs.Scores:
    """`replay-server serve SAVED` and inspect against it; all requests must hit."""
    with service("serve", str(saved)) as server:
        ran = run(f"inspect_ai: {label}", inspect_runs.command(ws.dir / f"inspect-{label}", *extra),
                  {**ws.env, "FAKE_BASE_URL": server.url, "FAKE_API_KEY": "x"}, ws.tasks,
                  inspect_runs.PRINTED)
        all_hit(server.status())
    assert ran.code == 0, ran.output[-3000:]
    return inspect_runs.read_scores(ws.dir / f"inspect-{label}", ran.output)


def assert_same_inspect_scores(replayed: inspect_runs.Scores,
                               original: inspect_runs.Scores) -> None:
    assert replayed.status == original.status == "success"
    assert replayed.printed == original.printed  # tokens used, accuracy, stderr
    assert replayed.metrics == original.metrics
    assert replayed.samples == original.samples


def test_inspect_sees_right_and_wrong_answers_a_dialogue_and_a_tool_call(
        inspect_original: tuple[Path, inspect_runs.Scores]) -> None:
    original = inspect_original[1]
    assert 0 < original.metrics["includes/accuracy"] < 1
    assert len(original.samples["tool"][2]) == 2  # the tool call, then the answer
    assert "multi" in original.samples


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_inspect_rescored_from_the_recording_scores_the_same(
        ws: Workspace, inspect_original: tuple[Path, inspect_runs.Scores], stream: bool) -> None:
    recording, original = inspect_original
    extra = ("-M", "stream=true") if stream else ()
    label = "replayed-stream" if stream else "replayed"
    replayed = rescore_inspect(ws, label, recording, *extra)
    assert_same_inspect_scores(replayed, original)


def test_inspect_rescored_from_its_own_eval_log_scores_the_same(
        ws: Workspace, inspect_original: tuple[Path, inspect_runs.Scores]) -> None:
    original = inspect_original[1]
    replayed = rescore_inspect(ws, "from-log", original.log)
    assert_same_inspect_scores(replayed, original)


def test_inspect_against_another_tasks_run_fails_loudly(
        ws: Workspace, lm_eval_original: Callable[[str], Original]) -> None:
    wrong = lm_eval_original("chat_repeats").recording
    command = inspect_runs.command(ws.dir / "inspect-wrong-run")
    line = 'FAKE_BASE_URL="$OPENAI_BASE_URL" FAKE_API_KEY=x ' + shlex.join(command)
    ran = run("inspect_ai: against the wrong run", [*REPLAY, "run", str(wrong), "--", "sh",
                                                    "-c", line], ws.env, ws.tasks, RUN_PRINTED)
    # inspect logs the failed samples, writes no score and exits 0: `run` fails it (3)
    assert ran.code == 3, ran.output[-3000:]
    assert "replay_no_match=6" in ran.output
    failed = inspect_runs.read_scores(ws.dir / "inspect-wrong-run", ran.output)
    assert failed.status == "error" and failed.metrics == {}


# --------------------------------------------------------------------------- port check


def test_a_port_rescores_the_other_harness_s_run_and_a_drift_is_one_group(
        ws: Workspace) -> None:
    """lm-eval's run, rescored by inspect_ai through a task ported to send the same
    prompts: every answer is lm-eval's, instance by instance. Then the port drifts by one
    character of its template: every request misses, and the report shows one group."""
    original = ws.dir / "port-lm_eval"
    ran = run("port check: lm-eval's original run", lm_eval_runs.PORT_CASE.command(
        ws.fake, original), ws.env, ws.tasks)
    assert ran.code == 0, ran.output[-3000:]
    lm_eval = lm_eval_runs.read_scores(original, "arith_chat_greedy", ran.output)
    saved = {s["doc"]["id"]: s["resps"][0][0] for s in lm_eval.samples}

    def rescore(label: str, answer: str) -> tuple[int, str, Path, Path]:
        logs, report = ws.dir / f"port-inspect-{label}", ws.dir / f"port-{label}.jsonl"
        command = [*inspect_runs.command(logs)]
        command[command.index("inspect_arith.py")] = "port_arith.py"
        line = (f'PORT_ANSWER="{answer}" FAKE_BASE_URL="$OPENAI_BASE_URL" FAKE_API_KEY=x '
                + shlex.join(command))
        done = run(f"port check: inspect_ai rescoring lm-eval's run ({label})",
                   [*REPLAY, "run", str(original), "--report", str(report), "--", "sh", "-c",
                    line], ws.env, ws.tasks, RUN_PRINTED + r"|^    \d+: ")
        return done.code, done.output, logs, report

    code, output, logs, report = rescore("same", "Answer:")
    assert code == 0, output[-3000:]
    ported = inspect_runs.read_scores(logs, output)
    assert {i: s[0] for i, s in ported.samples.items()} == saved  # instance by instance
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == len(saved) and {line["status"] for line in lines} == {"hit"}

    code, output, logs, report = rescore("drifted", "Answer: ")
    assert code == 3, output[-3000:]  # inspect_ai itself exits 0 on failed samples
    # the template feeds the few-shot question first: every prompt first differs there
    group = "message 1 (user): whitespace differs at the end"
    assert f"    {len(saved)}: {group} (e.g. nearest" in output
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert {line["status"] for line in lines} == {"miss"} and len(lines) == len(saved)
    assert {line["first_difference"]["group"] for line in lines} == {group}


# --------------------------------------------------------------------------- clients


@pytest.mark.parametrize("client", ["openai", "litellm"])
def test_client_sessions_replay_every_recorded_answer(ws: Workspace, client: str) -> None:
    """Sync, async, streamed, n > 1, repeats, a tool call and 64 requests in flight."""
    session = [sys.executable, "-m", "tests.harnesses.clients", client]
    recording = ws.dir / f"{client}.jsonl"
    with service("record", "--upstream", ws.fake, "--out", str(recording)) as rec:
        ran = run(f"{client}: original session, recorded", [*session, rec.url], ws.env, ROOT)
    assert ran.code == 0, ran.output[-3000:]
    original = json.loads(ran.output)
    with service("serve", str(recording)) as server:
        ran = run(f"{client}: replayed session", [*session, server.url], ws.env, ROOT)
        all_hit(server.status())
    assert ran.code == 0, ran.output[-3000:]
    replayed = json.loads(ran.output)
    # A recorded batch is saved one record per prompt, with the batch's usage beside them:
    # the same batch asked for again gets it back (docs/recording.md)
    assert original["batch"]["usage"] is not None
    assert replayed == original
    assert len({c[1] for c in original["n3"]["choices"]}) > 1
    assert len({str(r) for r in original["repeats"]}) == 3
    assert original["length"]["choices"][0][3] == "length"
    assert any(g["choices"][0][2] for g in original["greedy"]), "no reasoning sent"


# --------------------------------------------------------------------------- olmo-eval


def test_olmo_eval_requests_hit_and_get_the_saved_raw_text() -> None:
    """What olmo-eval's OpenAI provider sends (chat with a system prompt, n = num_samples,
    logprobs asked), sent with the exact bodies through `replay-server serve RUN_DIR`."""
    expected = [json.loads(line) for line in
                (OLMO_RUN / "expected_requests.jsonl").read_text().splitlines()]
    failing = [json.loads(line) for line in
               (OLMO_RUN / "expected_errors.jsonl").read_text().splitlines()]
    assert any(e["request"].get("n", 1) > 1 for e in expected)
    with service("serve", str(OLMO_RUN)) as server, \
            openai.OpenAI(base_url=server.url, api_key="x", max_retries=0) as client:
        for case in expected:
            r = send(client, case["path"], case["request"])
            texts = [c.message.content if hasattr(c, "message") else c.text for c in r.choices]
            assert texts == case["expect"]["texts"], case["source"]
            assert [c.finish_reason for c in r.choices] == case["expect"]["finish_reasons"]
        for case in failing:
            with pytest.raises(openai.APIStatusError) as e:
                send(client, case["path"], case["request"])
            assert e.value.status_code == case["expect_error"]["status"]
            assert e.value.code == case["expect_error"]["code"]
        totals = server.status()["totals"]
    assert totals["hits"] == len(expected)


def send(client: openai.OpenAI, path: str, body: dict[str, Any]) -> Any:
    """POST `body` as it is: known parameters by name, the rest as extra_body."""
    create: Any = (client.chat.completions.create if path.endswith("/chat/completions")
                   else client.completions.create)
    known = set(inspect.signature(create).parameters)
    return create(**{k: v for k, v in body.items() if k in known},
                  extra_body={k: v for k, v in body.items() if k not in known})


def olmo_eval_rescoring(run_dir: Path, tmp: Path, *options: str) -> tuple[Ran, list[Any]]:
    """olmo-eval's vllm_server provider (the stand-in: olmo_eval_stand_in.py) rescoring
    its own saved files under `replay-server run`: every usable instance's request, then
    the /tokenize calls its metrics collector makes where the answer has no count."""
    out = tmp / "rescored.jsonl"
    ran = run("olmo-eval vllm_server under run", [
        *REPLAY, "run", str(run_dir), *options, "--", sys.executable, "-m",
        "tests.harnesses.olmo_eval_stand_in", str(run_dir / "expected_requests.jsonl"),
        str(out)], offline_env(tmp), ROOT, RUN_PRINTED)
    return ran, [json.loads(line) for line in out.read_text().splitlines()]


def saved_texts(run_dir: Path, source: dict[str, Any]) -> list[str]:
    """What olmo-eval saved for an instance: the raw text (`original_text`, else `text`)."""
    for line in (run_dir / source["file"]).read_text().splitlines():
        row = json.loads(line)
        if row["doc_id"] == source["doc_id"]:
            return [o.get("original_text", o["text"]) for o in row["model_output"]]
    raise AssertionError(source)


@pytest.mark.parametrize("name", ["run_basic", "run_old_builder"])
def test_olmo_eval_rescores_its_own_files_under_plain_run_despite_its_tokenize_calls(
        name: str, tmp_path: Path) -> None:
    """olmo-eval's collector asks /tokenize for the counts the answer lacks (a saved run
    keeps no prompt count; the old builder no count at all). Nothing records them, and no
    --tokenizer computes them: they go unanswered, the provider estimates, and `run`
    passes, saying so loudly, with every prediction the saved one. (It exited 3: a 404
    from /tokenize was counted as a replay miss.)"""
    run_dir = ROOT / "tests" / "data" / "olmo_eval" / name
    ran, rescored = olmo_eval_rescoring(run_dir, tmp_path)
    assert ran.code == 0, ran.output
    calls = sum(len(r["tokenizer_answered"]) for r in rescored)
    assert calls >= 4 and not any(ok for r in rescored for ok in r["tokenizer_answered"])
    assert f"WARNING: {calls} tokenizer call(s) went unanswered: token counts the harness " \
        "derives from them may differ; no saved generation was affected" in ran.output
    assert "0 got no saved generation" in ran.output
    for instance in rescored:
        assert instance["texts"] == saved_texts(run_dir, instance["source"])


def test_olmo_eval_rescoring_fails_on_unanswered_tokenize_calls_under_strict(
        tmp_path: Path) -> None:
    run_dir = ROOT / "tests" / "data" / "olmo_eval" / "run_old_builder"
    ran, _ = olmo_eval_rescoring(run_dir, tmp_path, "--strict")
    assert ran.code == 3, ran.output
    assert "--strict fails the run on them: failing" in ran.output
