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
from replay_server.index.loading import load
from replay_server.saved.formats import LoadContext
from replay_server.saved.loader import plan, read
from replay_server.settings import Settings
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "lm_eval"
# The runs this reader serves without a tokenizer (the others are test_tokens.py's).
TEXT_RUNS = [DATA / "chat_repeats", DATA / "completions_batch", DATA / "loglikelihood_mc"]
ROOT = Path(__file__).parents[3]
LOGLIKELIHOOD = ("loglikelihood request (its token logprobs are rebuilt from the saved sum with "
                 "the run's tokenizer: give --tokenizer)")
GEN = Path(__file__).parents[2] / "data" / "gen"
LOGLIKELIHOOD_CASES = {"loglikelihood_mc", "mc_tokenized"}
TOKENIZED = {"loglikelihood_mc": GEN / "tokenizer", "mc_tokenized": GEN / "tokenizer_bpe",
             "tokenized_gen": GEN / "tokenizer"}
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


# --------------------------------------------------------------------------- --tokenizer


def all_rows(case: str) -> list[dict[str, Any]]:
    """The rows of every samples file of a case (one per task)."""
    return [json.loads(line) for path in sorted((DATA / case).glob("*/samples_*.jsonl"))
            for line in path.read_text().splitlines()]


def lm_eval_reads(case: str, request: dict[str, Any], choice: dict[str, Any]
                  ) -> tuple[float, bool]:
    """What lm-eval's own parser reads from a served loglikelihood choice, with the ctxlen
    lm-eval computes itself for that request (from the samples row it came from)."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from replay_server.saved import local_tokenizer, tokens

    tok = local_tokenizer.load_tokenizer(TOKENIZED[case])
    bos = case == "mc_tokenized"  # that run's model_args: add_bos_token=True, max_length=15
    max_length = 15 if bos else 2048
    for row in all_rows(case):
        for args in row["arguments"].values():
            ids, ctxlen = tokens.loglikelihood_input(
                *tokens.encode_pair(tok, args["arg_0"], args["arg_1"], add_bos_token=bos),
                max_length=max_length)
            if ids == request["prompt"]:
                [(logprob, greedy)] = LocalCompletionsAPI.parse_logprobs(
                    {"choices": [choice]}, ctxlens=[ctxlen])
                return logprob, greedy
    raise AssertionError("no saved row sends these ids")


@pytest.mark.http
@pytest.mark.parametrize("case", [  # loglikelihoods are read back with lm-eval's parser
    pytest.param(case, marks=[pytest.mark.harness] if case in LOGLIKELIHOOD_CASES else [])
    for case in TOKENIZED])
def test_with_the_tokenizer_every_token_id_request_gets_the_saved_answer(case: str) -> None:
    """Every request lm-eval sent (token ids, batched), from its samples file alone, in
    strict mode; loglikelihoods read back by lm-eval's parser as saved; and the same
    requests sent as text (tokenized_requests=False) are answered too."""
    saved = {}
    for row in all_rows(case):
        for i, args in enumerate(row["arguments"].values()):
            if isinstance(args["arg_1"], str):
                saved[args["arg_0"], args["arg_1"]] = row["resps"][i][0]
    settings = Settings(strict=True, tokenizer=str(TOKENIZED[case]))
    with serving([DATA / case], settings) as url, httpx.Client(base_url=url) as http:
        for call in wire(case):
            got = http.post("/completions", json=call["request"])
            assert got.status_code == 200, got.text
            choices = got.json()["choices"]
            assert len(choices) == len(call["response"]["choices"])
            if not call["request"].get("echo"):
                assert [c["text"] for c in choices] == [
                    c["text"] for c in call["response"]["choices"]]
                continue
            for prompt, choice in zip(call["request"]["prompt"], choices, strict=True):
                logprob, greedy = lm_eval_reads(case, {"prompt": prompt}, choice)
                assert [repr(logprob), str(greedy)] in saved.values()
        status = http.get(url.removesuffix("/v1") + "/replay/status").json()
    assert status["totals"]["unused_samples"] == 0


@pytest.mark.harness  # lm-eval's parser reads them
def test_loglikelihood_answers_are_the_saved_values_exactly() -> None:
    """Each saved (logprob, is_greedy) comes back through lm-eval's parser bit for bit."""
    from replay_server.saved import tokens

    loaded = load([DATA / "loglikelihood_mc"], progress=False,
                  tokenizer=str(TOKENIZED["loglikelihood_mc"]))
    tok = loaded.ctx.tokenizer
    from replay_server.index.samples import Rules
    from replay_server.replay.replayer import Replayer
    replayer = Replayer(loaded.index, Rules())
    checked = 0
    for row in rows("loglikelihood_mc"):
        for i, args in enumerate(row["arguments"].values()):
            ids, _ = tokens.loglikelihood_input(*tokens.encode_pair(tok, args["arg_0"],
                                                                    args["arg_1"]))
            for prompt in (ids, tokens.decode_like_lm_eval(tok, ids)):
                body = replayer.handle("/v1/completions", orjson.dumps(
                    {"model": "tiny-model", "prompt": [prompt], "echo": True, "logprobs": 1,
                     "max_tokens": 1, "temperature": 0}))
                choice = orjson.loads(body.body)["choices"][0]
                logprob, greedy = lm_eval_reads("loglikelihood_mc", {"prompt": ids}, choice)
                assert [repr(logprob), str(greedy)] == row["resps"][i][0]
                checked += 1
    assert checked == 6 * 4 * 2


def test_without_the_tokenizer_loglikelihood_rows_are_skipped_saying_how_to_serve_them(
        ) -> None:
    loaded = load([DATA / "mc_tokenized"], progress=False)
    assert loaded.ctx.skipped[LOGLIKELIHOOD] == 12 and "--tokenizer" in LOGLIKELIHOOD
    assert not loaded.index.models


def test_a_bad_tokenizer_path_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="--tokenizer"):
        load([DATA / "tokenized_gen"], progress=False, tokenizer=str(tmp_path / "nope"))


# --------------------------------------------------------------------------- perplexity

ROLLING_NO_TOKENIZER = ("loglikelihood_rolling request (its windows are rebuilt from the saved "
                        "sum with the run's tokenizer: give --tokenizer)")
ROLLING_SKIPPED = "loglikelihood_rolling document whose saved sum cannot be served exactly"


def rolling_sums(replayer: Any, texts: list[str], tok: Any) -> list[float]:
    """What lm-eval's `loglikelihood_rolling` makes of the served windows: its parser's
    value of each window, summed in window order with Python's `sum`, as lm-eval does."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from replay_server.saved import rolling

    sums = []
    for text in texts:
        values = []
        for ids, ctxlen in rolling.windows(tok, text, max_length=10):  # the run's max_length
            reply = replayer.handle("/v1/completions", orjson.dumps(
                {"model": "tiny-model", "prompt": [ids], "echo": True, "logprobs": 1,
                 "max_tokens": 1, "temperature": 0, "seed": 1234}))
            choices = orjson.loads(reply.body)["choices"]
            [(value, _)] = LocalCompletionsAPI.parse_logprobs({"choices": choices},
                                                              ctxlens=[ctxlen])
            values.append(value)
        sums.append(sum(values))
    return sums


@pytest.mark.harness  # lm-eval's parser reads the windows
def test_perplexity_documents_sum_to_their_saved_values_exactly() -> None:
    """Five documents, three sharing their first window (one is that window alone), one of
    five windows: each sums back, through lm-eval's parser, to its saved value bit for bit."""
    from replay_server.index.samples import Rules
    from replay_server.replay.replayer import Replayer

    loaded = load([DATA / "perplexity"], progress=False, tokenizer=str(GEN / "tokenizer"))
    assert not loaded.ctx.skipped
    got = rolling_sums(Replayer(loaded.index, Rules()),
                       [r["arguments"]["gen_args_0"]["arg_0"] for r in rows("perplexity")],
                       loaded.ctx.tokenizer)
    assert [repr(v) for v in got] == [r["resps"][0][0] for r in rows("perplexity")]


@pytest.mark.http
def test_perplexity_requests_as_lm_eval_sent_them_are_all_answered() -> None:
    """Every request of the wire log (windows batched two by two, as ids), in strict
    mode, and as text (tokenized_requests=False); every saved window is asked for."""
    from replay_server.saved import local_tokenizer, tokens

    tok = local_tokenizer.load_tokenizer(GEN / "tokenizer")
    settings = Settings(strict=True, tokenizer=str(GEN / "tokenizer"))
    with serving([DATA / "perplexity"], settings) as url, httpx.Client(base_url=url) as http:
        for call in wire("perplexity"):
            as_text = [tokens.decode_like_lm_eval(tok, ids) for ids in call["request"]["prompt"]]
            for prompt in (call["request"]["prompt"], as_text):
                got = http.post("/completions", json={**call["request"], "prompt": prompt})
                assert got.status_code == 200, got.text
        status = http.get(url.removesuffix("/v1") + "/replay/status").json()
    assert status["totals"]["unused_samples"] == 0


def test_without_the_tokenizer_perplexity_rows_are_skipped_saying_how_to_serve_them() -> None:
    loaded = load([DATA / "perplexity"], progress=False)
    assert loaded.ctx.skipped == {ROLLING_NO_TOKENIZER: 5} and not loaded.index.models


@pytest.mark.http
def test_a_document_that_cannot_be_made_exact_is_named_and_its_windows_refuse(
        tmp_path: Path) -> None:
    """p2 saved with p1's text but another sum: both are named, and their window of their
    own answers replay_unusable; their first window, p3's whole text, still serves p3."""
    case = tmp_path / "perplexity"
    shutil.copytree(DATA / "perplexity", case)
    samples = next(case.glob("*/samples_*.jsonl"))
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[1]["arguments"] = lines[0]["arguments"]
    samples.write_text("".join(json.dumps(r) + "\n" for r in lines))
    loaded = load([case], progress=False, tokenizer=str(GEN / "tokenizer"))
    (reason,) = loaded.ctx.skipped
    assert reason.startswith(ROLLING_SKIPPED) and "different sums" in reason
    assert loaded.ctx.skipped_examples[reason] == [f"{samples}:1", f"{samples}:2"]
    with serving([case], Settings(tokenizer=str(GEN / "tokenizer"))) as url, \
            openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
        p1 = wire("perplexity")[0]["request"]  # p1's two windows
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(**p1)
        assert refused.value.code == "replay_unusable"
        p3 = wire("perplexity")[2]["request"]  # p3: its one window, the shared one
        assert client.completions.create(**p3).choices[0].logprobs is not None


@pytest.mark.http
def test_windows_of_another_max_length_or_text_miss() -> None:
    """Keyed on the ids: a document cut at another max_length, or of another text, sends
    windows that were never saved, each a replay_no_match, so lm-eval fails on it (a
    window it shares with the saved document, the same ids, is the saved one's)."""
    from replay_server.saved import local_tokenizer, rolling

    tok = local_tokenizer.load_tokenizer(GEN / "tokenizer")
    p1 = rows("perplexity")[0]["arguments"]["gen_args_0"]["arg_0"]
    saved = {tuple(call["request"]["prompt"][i]) for call in wire("perplexity")
             for i in range(len(call["request"]["prompt"]))}
    others = [rolling.windows(tok, p1, max_length=12),
              rolling.windows(tok, p1.replace("What", "Answer"), max_length=10)]
    with serving([DATA / "perplexity"], Settings(tokenizer=str(GEN / "tokenizer"))) as url, \
            httpx.Client(base_url=url) as http:
        for windows in others:
            assert any(tuple(ids) not in saved for ids, _ in windows)
            for ids, _ in windows:
                got = http.post("/completions", json={
                    "model": "tiny-model", "prompt": [ids], "echo": True, "logprobs": 1,
                    "max_tokens": 1, "temperature": 0, "seed": 1234})
                if tuple(ids) in saved:
                    assert got.status_code == 200
                else:
                    assert got.status_code == 400
                    assert got.json()["error"]["code"] == "replay_no_match"


@pytest.mark.http
def test_documents_in_two_folders_are_assigned_together(tmp_path: Path) -> None:
    """p1 saved again, alone, in a second folder of the same model: its windows are the
    same requests, so one value each for both folders (not one per folder, which made
    p1's shared first window replay_ambiguous), and p1 still sums to its saved value."""
    from replay_server.saved import local_tokenizer, rolling

    alone = tmp_path / "perplexity"
    shutil.copytree(DATA / "perplexity", alone)
    samples = next(alone.glob("*/samples_*.jsonl"))
    samples.write_text(samples.read_text().splitlines()[0] + "\n")
    tok = local_tokenizer.load_tokenizer(GEN / "tokenizer")
    p1 = rows("perplexity")[0]
    settings = Settings(tokenizer=str(GEN / "tokenizer"))
    with serving([alone, DATA / "perplexity"], settings) as url, \
            httpx.Client(base_url=url) as http:
        values = []
        for ids, ctxlen in rolling.windows(tok, p1["arguments"]["gen_args_0"]["arg_0"],
                                           max_length=10):
            got = http.post("/completions", json={
                "model": "tiny-model", "prompt": [ids], "echo": True, "logprobs": 1,
                "max_tokens": 1, "temperature": 0, "seed": 1234})
            assert got.status_code == 200, got.text
            values.append(sum(got.json()["choices"][0]["logprobs"]["token_logprobs"]
                              [ctxlen:-1]))  # lm-eval's parser
    assert repr(sum(values)) == p1["resps"][0][0]
