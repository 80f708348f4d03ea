#!/usr/bin/env python3
"""Regenerate tests/data/lm_eval/ and tests/data/inspect_ai/ with the real harnesses.

Run it with a Python that has lm-eval, inspect-ai, transformers, tokenizers, starlette
and uvicorn installed (not the project's venv), from anywhere:

    /work/hvenv/bin/python tests/data/gen/make_harness_data.py [--only CASE ...]

For each case it starts the fake model server (tests/fakemodel/server.py) on a free
127.0.0.1 port with a fresh state and a wire log, runs the harness against it with
every hub access switched off, and copies the harness's own output files plus the wire
log (`wire.jsonl`: one {"path", "request", "response"} per HTTP request) into
tests/data/<harness>/<case>/. Nothing but 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GEN = REPO / "tests" / "data" / "gen"
TASKS = GEN / "tasks"
TOKENIZER = GEN / "tokenizer"
OUT_LM = REPO / "tests" / "data" / "lm_eval"
OUT_INSPECT = REPO / "tests" / "data" / "inspect_ai"
MODEL = "tiny-model"
PREFERRED_PORT = 18431
PY = sys.executable
GEMINI = "google/gemini-2.5-flash"  # the fake's Gemini API answers any gemini* name
# the cases that need no tokenizer (the others but perplexity rebuild it first)
INSPECT_ONLY = {"inspect_responses", "inspect_responses_stream", "inspect_google",
                "inspect_google_stream", "inspect_batch", "inspect_batch_anthropic"}
CLAUDE = "anthropic/claude-fake"  # the fake's Messages API answers any model name
# inspect's --batch, sent after 0.2 s and polled every 0.2 s (15 s each by default)
BATCH = {"size": 10, "send_delay": 0.2, "tick": 0.2}


def bin_path(name: str) -> str:
    p = Path(PY).parent / name
    return str(p) if p.exists() else name


def free_port() -> int:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind(("127.0.0.1", PREFERRED_PORT))
            return PREFERRED_PORT
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def offline_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    for k in list(env):
        if k.lower() in ("http_proxy", "https_proxy", "all_proxy") or k.startswith(
            ("OPENAI_", "INSPECT_", "GOOGLE_", "GEMINI_", "VERTEX")
        ):
            env.pop(k)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_EVALUATE_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "DO_NOT_TRACK": "1",
            "HF_HOME": str(tmp / "hf"),
            "HF_DATASETS_CACHE": str(tmp / "hf" / "datasets"),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONHASHSEED": "0",
            "OPENAI_API_KEY": "fake-key",
            "INSPECT_DISPLAY": "plain",
            "INSPECT_LOG_DIR": str(tmp / "inspect-default-logs"),
        }
    )
    return env


class FakeServer:
    """The fake model server in a subprocess, with a wire log."""

    def __init__(self, wire: Path, env: dict[str, str]):
        self.port = free_port()
        self.wire = wire
        self.env = env

    def __enter__(self) -> FakeServer:
        cmd = [
            PY,
            "-m",
            "tests.fakemodel.server",
            "--port",
            str(self.port),
            "--model",
            MODEL,
            "--log",
            str(self.wire),
            "--tokenizer",
            str(TOKENIZER / "tokenizer.json"),
        ]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("fake model server did not start")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def run(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> str:
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log.write_text(p.stdout)
    if p.returncode != 0:
        print(p.stdout[-6000:])
        raise SystemExit(f"command failed ({p.returncode}): see {log}")
    return p.stdout


def build_tokenizer() -> None:
    """A tiny WordLevel HF tokenizer over the task texts, saved to tests/data/gen/tokenizer/."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for name in ("arith.jsonl", "arith_train.jsonl", "arith_mc.jsonl"):
        for line in (TASKS / name).read_text().splitlines():
            d = json.loads(line)
            texts.append(f"Question: {d['question']}\nAnswer: The answer is {d.get('answer', '')}.")
            texts.extend(d.get("choices", []))
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>", "<pad>"])
    tok.train_from_iterator(sorted(texts), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    if TOKENIZER.exists():
        shutil.rmtree(TOKENIZER)
    fast.save_pretrained(str(TOKENIZER))


def copy_lm_eval_output(src: Path, case: str, wire: Path, stdout: str) -> Path:
    dest = OUT_LM / case
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    shutil.copy(wire, dest / "wire.jsonl")
    # the results table lm-eval printed (the last markdown table block)
    table = [ln for ln in stdout.splitlines() if ln.startswith("|")]
    (dest / "printed_scores.txt").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return dest


def lm_eval_case(
    case: str,
    tmp: Path,
    env: dict[str, str],
    model: str,
    model_args: str,
    task: str,
    extra: list[str],
) -> None:
    work = tmp / case
    work.mkdir()
    wire = work / "wire.jsonl"
    with FakeServer(wire, env) as srv:
        endpoint = "chat/completions" if "chat" in model else "completions"
        args = f"model={MODEL},base_url={srv.base}/v1/{endpoint},max_retries=1," + model_args
        out = run(
            [
                bin_path("lm_eval"),
                "run",
                "--model",
                model,
                "--model_args",
                args,
                "--tasks",
                task,
                "--include_path",
                str(TASKS),
                "--output_path",
                str(work / "out"),
                "--log_samples",
                *extra,
            ],
            env,
            TASKS,
            work / "stdout.txt",
        )
    copy_lm_eval_output(work / "out", case, wire, out)


def lm_eval_cases(tmp: Path, env: dict[str, str], only: set[str]) -> None:
    if not only or "chat_repeats" in only:
        lm_eval_case(
            "chat_repeats",
            tmp,
            env,
            "local-chat-completions",
            "num_concurrent=1",
            "arith_chat_sampled",
            [
                "--apply_chat_template",
                "--system_instruction",
                "You are a helpful math assistant. End with 'The answer is N.'",
            ],
        )
    if not only or "completions_batch" in only:
        lm_eval_case(
            "completions_batch",
            tmp,
            env,
            "local-completions",
            "tokenizer=../tokenizer,tokenizer_backend=huggingface,tokenized_requests=False",
            "arith_gen",
            ["--batch_size", "4"],
        )
    if not only or "loglikelihood_mc" in only:
        lm_eval_case(
            "loglikelihood_mc",
            tmp,
            env,
            "local-completions",
            "tokenizer=../tokenizer,tokenizer_backend=huggingface",
            "arith_mc",
            ["--batch_size", "2"],
        )
    if not only or "perplexity" in only:  # loglikelihood_rolling windows of 8 tokens
        lm_eval_case(
            "perplexity",
            tmp,
            env,
            "local-completions",
            "tokenizer=../tokenizer,tokenizer_backend=huggingface,max_length=10",
            "ppl_text",
            ["--batch_size", "2"],
        )


def inspect_case(
    case: str,
    tmp: Path,
    env: dict[str, str],
    extra: list[str],
    log_format: str = "eval",
    convert: bool = False,
    model: str = f"openai-api/fake/{MODEL}",
) -> None:
    """Run the inspect task once; keep its log (with convert: also `inspect log convert`)."""
    work = tmp / case
    work.mkdir()
    wire = work / "wire.jsonl"
    logs = work / "logs"
    with FakeServer(wire, env) as srv:
        # openai-api/fake/... reads FAKE_*, openai/... the OpenAI SDK's own variables,
        # google/... GOOGLE_BASE_URL (the root: the SDK adds the version) and GOOGLE_API_KEY,
        # anthropic/... ANTHROPIC_BASE_URL (the root) and ANTHROPIC_API_KEY
        env = dict(env, FAKE_BASE_URL=f"{srv.base}/v1", FAKE_API_KEY="fake-key",
                   OPENAI_BASE_URL=f"{srv.base}/v1", GOOGLE_BASE_URL=srv.base,
                   GOOGLE_API_KEY="fake-key", ANTHROPIC_BASE_URL=srv.base,
                   ANTHROPIC_API_KEY="fake-key")
        run(
            [
                bin_path("inspect"),
                "eval",
                "inspect_arith.py",
                "--model",
                model,
                "--log-dir",
                str(logs),
                "--log-format",
                log_format,
                "--temperature",
                "0",
                "--display",
                "plain",
                *extra,
            ],
            env,
            TASKS,
            work / "stdout.txt",
        )
    written = sorted(logs.glob(f"*.{log_format}"))
    assert len(written) == 1, written
    log_file = written[0]
    dest = OUT_INSPECT / case
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy(log_file, dest / log_file.name)
    if convert:
        run(
            [
                bin_path("inspect"),
                "log",
                "convert",
                str(log_file),
                "--to",
                "json",
                "--output-dir",
                str(work / "json"),
            ],
            env,
            TASKS,
            work / "convert.txt",
        )
        for j in (work / "json").glob("*.json"):
            shutil.copy(j, dest / j.name)
    shutil.copy(wire, dest / "wire.jsonl")

    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(log_file))
    lines = [f"status: {log.status}"]
    for score in log.results.scores if log.results else []:
        for name, metric in score.metrics.items():
            lines.append(f"{score.name}/{name}: {metric.value}")
    printed = [
        ln.strip()
        for ln in (work / "stdout.txt").read_text().splitlines()
        if ln.strip().startswith(("accuracy", "stderr"))
    ]
    (dest / "printed_scores.txt").write_text("\n".join(lines + ["printed:"] + printed) + "\n")
    print("\n".join(lines + printed))


def check_lm_eval() -> None:
    """Cross-check each samples file against the wire log it was produced with."""
    from transformers import AutoTokenizer

    def load(case: str) -> tuple[list[dict], list[dict]]:
        samples_file = next((OUT_LM / case).glob("*/samples_*.jsonl"))
        samples = [json.loads(ln) for ln in samples_file.read_text().splitlines()]
        wire = [json.loads(ln) for ln in (OUT_LM / case / "wire.jsonl").read_text().splitlines()]
        return samples, wire

    if (OUT_LM / "chat_repeats").exists():  # resps[0] = the k identical calls' contents, in order
        samples, wire = load("chat_repeats")
        calls: dict[str, list[str]] = {}
        for w in wire:
            key = json.dumps(w["request"]["messages"], sort_keys=True)
            calls.setdefault(key, []).append(w["response"]["choices"][0]["message"]["content"])
        for smp in samples:
            msgs = json.loads(smp["arguments"]["gen_args_0"]["arg_0"][0])
            assert calls[json.dumps(msgs, sort_keys=True)] == smp["resps"][0], smp["doc_id"]
    if (OUT_LM / "completions_batch").exists():  # batched prompts: choice i <-> prompt i
        samples, wire = load("completions_batch")
        texts = {
            p: w["response"]["choices"][i]["text"]
            for w in wire
            for i, p in enumerate(w["request"]["prompt"])
        }
        for smp in samples:
            assert texts[smp["arguments"]["gen_args_0"]["arg_0"]] == smp["resps"][0][0]
    if (OUT_LM / "loglikelihood_mc").exists():  # resps = sum(token_logprobs[ctxlen:-1])
        tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
        samples, wire = load("loglikelihood_mc")
        lps = {
            tuple(p): w["response"]["choices"][i]["logprobs"]
            for w in wire
            for i, p in enumerate(w["request"]["prompt"])
        }
        for smp in samples:
            for name, ga in smp["arguments"].items():
                ctx = tok(ga["arg_0"], add_special_tokens=False).input_ids
                whole = tok(ga["arg_0"] + ga["arg_1"], add_special_tokens=False).input_ids
                lp = lps[tuple(whole)]["token_logprobs"][len(ctx) : -1]
                resp = smp["resps"][int(name.rsplit("_", 1)[1])][0]
                assert float(resp[0]) == sum(lp), (smp["doc_id"], name)
    print("lm-eval samples agree with the wire logs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--only",
        nargs="*",
        default=[],
        help="cases: chat_repeats completions_batch loglikelihood_mc perplexity "
        "inspect_arith inspect_arith_json inspect_arith_stream inspect_responses "
        "inspect_responses_stream inspect_google inspect_google_stream inspect_batch "
        "inspect_batch_anthropic",
    )
    ap.add_argument("--keep-tmp", action="store_true")
    a = ap.parse_args()
    only = set(a.only)
    tmp = Path(tempfile.mkdtemp(prefix="harness-data-"))
    env = offline_env(tmp)
    try:
        if not only or only - INSPECT_ONLY - {"perplexity"}:  # its text is not the tokenizer's
            build_tokenizer()
        lm_eval_cases(tmp, env, only)
        if not only or "inspect_arith" in only:
            inspect_case("arith", tmp, env, [], "eval", convert=True)
        if not only or "inspect_arith_json" in only:
            inspect_case("arith_json", tmp, env, [], "json")
        if not only or "inspect_arith_stream" in only:
            inspect_case("arith_stream", tmp, env, ["-M", "stream=true"], "eval")
        # the openai/ provider over the Responses API (its default for OpenAI's reasoning
        # models; any model with responses_api=true)
        responses = ["-M", "responses_api=true"]
        if not only or "inspect_responses" in only:
            inspect_case("responses", tmp, env, responses, "eval", model=f"openai/{MODEL}")
        if not only or "inspect_responses_stream" in only:
            inspect_case("responses_stream", tmp, env, [*responses, "-M", "streaming=true"],
                         "eval", model=f"openai/{MODEL}")
        # the google/ provider (google-genai, the Gemini API), thinking on for a gemini-2.5
        # name; it streams only when asked
        if not only or "inspect_google" in only:
            inspect_case("google", tmp, env, [], "eval", model=GEMINI)
        if not only or "inspect_google_stream" in only:
            inspect_case("google_stream", tmp, env, ["-M", "streaming=true"], "eval",
                         model=GEMINI)
        # --batch: the openai/ provider's batches of chat completions (Files and Batches
        # APIs), the anthropic/ provider's Message Batches
        batch_config = tmp / "batch.json"
        batch_config.write_text(json.dumps(BATCH))
        batch = ["--batch", str(batch_config)]
        if not only or "inspect_batch" in only:
            inspect_case("batch", tmp, env, [*batch, "-M", "responses_api=false"], "eval",
                         model=f"openai/{MODEL}")
        if not only or "inspect_batch_anthropic" in only:
            inspect_case("batch_anthropic", tmp, env, batch, "eval", model=CLAUDE)
        if not only or only & {"chat_repeats", "completions_batch", "loglikelihood_mc"}:
            check_lm_eval()
    finally:
        if a.keep_tmp:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
