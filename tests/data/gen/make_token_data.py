#!/usr/bin/env python3
"""Regenerate the token-id cases of issue 16 with the real lm-eval (see README.md here):

    tests/data/gen/tokenizer_bpe/           a tiny byte-level BPE tokenizer (GPT-2 style
                                            pre-tokenizer, a post-processor that adds <s>),
                                            trained on the task texts
    tests/data/lm_eval/tokenized_gen/       local-completions generate_until, token-id
                                            prompts (tokenized_requests=True, the default)
    tests/data/lm_eval/mc_tokenized/        local-completions multiple choice with the BPE
                                            tokenizer, add_bos_token=True, a context that
                                            ends in a space, empty contexts
                                            (acc_mutual_info) and a max_length that cuts
                                            the longer requests

Run it with a Python that has lm-eval, transformers, tokenizers, starlette and uvicorn (the
project's .venv with the test extras has them all, no torch needed), from anywhere:

    .venv/bin/python tests/data/gen/make_token_data.py [--only CASE ...]

Like make_harness_data.py (whose helpers it uses): the fake model server on a free
127.0.0.1 port with a wire log, every hub access off, lm-eval's own output files copied
as they are, then a check that every wire prompt is what replay_server.saved.tokens computes
from the samples file, and that every saved loglikelihood is what lm-eval's parser reads
from the wire response.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_harness_data as mhd  # noqa: E402

REPO, GEN, TASKS, OUT_LM = mhd.REPO, mhd.GEN, mhd.TASKS, mhd.OUT_LM
TOKENIZER_BPE = GEN / "tokenizer_bpe"
sys.path.insert(0, str(REPO))

# (model name, tokenizer folder, model_args, tasks, extra lm-eval options)
GEN_CASE = ("tiny-model-tok", mhd.TOKENIZER,
            "tokenizer=../tokenizer,tokenizer_backend=huggingface", "arith_gen",
            ["--batch_size", "4"])
# max_length=15: lm-eval keeps the last 14 ids of a loglikelihood request, which cuts the
# requests of the longer questions (with <s> they are 13 to 16 ids long).
MC_CASE = ("tiny-model-bpe", TOKENIZER_BPE,
           "tokenizer=../tokenizer_bpe,tokenizer_backend=huggingface,add_bos_token=True,"
           "max_length=15", "arith_mc,arith_mc_ws", ["--batch_size", "3"])

# arith_mc with the delimiter in the context: "Answer: " + "9". lm-eval's _encode_pair
# moves the space to the continuation, so the ids equal arith_mc's "Answer:" + " 9".
# acc_mutual_info adds unconditional requests: context "" (lm-eval uses the BOS id).
ARITH_MC_WS = """\
# written by make_token_data.py: arith_mc with the target delimiter in the context
task: arith_mc_ws
dataset_path: json
dataset_kwargs:
  data_files:
    test: arith_mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer: "
target_delimiter: ""
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_mutual_info
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def build_bpe_tokenizer() -> None:
    """A byte-level BPE tokenizer over the task texts, small enough that some words stay in
    pieces, with a post-processor that puts <s> first (as Llama 3's does)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for name in ("arith.jsonl", "arith_train.jsonl", "arith_mc.jsonl"):
        for line in (TASKS / name).read_text().splitlines():
            d = json.loads(line)
            texts.append(f"Question: {d['question']}\nAnswer: The answer is {d.get('answer', '')}.")
            texts.extend(" " + c for c in d.get("choices", []))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sorted(texts), trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                      special_tokens=[("<s>", bos)]),
    ])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    if TOKENIZER_BPE.exists():
        shutil.rmtree(TOKENIZER_BPE)
    fast.save_pretrained(str(TOKENIZER_BPE))


class FakeServer:
    """tests/fakemodel in a subprocess, decoding token ids with `tokenizer`."""

    def __init__(self, wire: Path, env: dict[str, str], model: str, tokenizer: Path):
        self.port = mhd.free_port()
        self.cmd = [mhd.PY, "-m", "tests.fakemodel.server", "--port", str(self.port),
                    "--model", model, "--log", str(wire),
                    "--tokenizer", str(tokenizer / "tokenizer.json")]
        self.env = env

    def __enter__(self) -> FakeServer:
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=self.env)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("fake model server did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def run_case(case: str, spec: tuple, tmp: Path, env: dict[str, str]) -> None:
    model, tokenizer, model_args, tasks, extra = spec
    work = tmp / case
    work.mkdir()
    include = work / "tasks"
    include.mkdir()
    # the tasks, and their data with the loader that reads it from beside them
    for name in ("arith_gen.yaml", "arith_mc.yaml", "arith_data.py", "arith.jsonl",
                 "arith_mc.jsonl"):
        shutil.copy(TASKS / name, include / name)
    (include / "arith_mc_ws.yaml").write_text(ARITH_MC_WS)
    wire = work / "wire.jsonl"
    with FakeServer(wire, env, model, tokenizer) as srv:
        args = f"model={model},base_url={srv.base}/v1/completions,max_retries=1,{model_args}"
        out = mhd.run(
            [mhd.bin_path("lm_eval"), "run", "--model", "local-completions", "--model_args",
             args, "--tasks", tasks, "--include_path", str(include), "--output_path",
             str(work / "out"), "--log_samples", *extra],
            env, TASKS, work / "stdout.txt")  # cwd tasks/: data files and ../tokenizer*
    mhd.copy_lm_eval_output(work / "out", case, wire, out)


def _load(case: str) -> tuple[dict[str, list[dict]], list[dict], dict]:
    dest = OUT_LM / case
    samples = {}
    for path in sorted(dest.glob("*/samples_*.jsonl")):
        task = path.name[len("samples_"):].rsplit("_", 1)[0]
        samples[task] = [json.loads(ln) for ln in path.read_text().splitlines()]
    wire = [json.loads(ln) for ln in (dest / "wire.jsonl").read_text().splitlines()]
    results = json.loads(next(dest.glob("*/results_*.json")).read_text())
    return samples, wire, results


def check() -> None:
    """Every wire prompt is what replay_server.saved.tokens computes from the samples file."""
    from replay_server.saved import tokens
    from replay_server.saved.local_tokenizer import load_tokenizer

    if (OUT_LM / "tokenized_gen").exists():
        samples, wire, _ = _load("tokenized_gen")
        tok = load_tokenizer(mhd.TOKENIZER)
        texts = {tuple(p): w["response"]["choices"][i]["text"]
                 for w in wire for i, p in enumerate(w["request"]["prompt"])}
        assert all(isinstance(p, list) for w in wire for p in w["request"]["prompt"])
        for row in samples["arith_gen"]:
            args = row["arguments"]["gen_args_0"]
            ids = tokens.encode_like_lm_eval(
                tok, args["arg_0"], max_gen_toks=args["arg_1"].get("max_gen_toks", 256))
            assert texts[tuple(ids)] == row["resps"][0][0], row["doc_id"]
        assert len(texts) == len(samples["arith_gen"])
    if (OUT_LM / "mc_tokenized").exists():
        samples, wire, _ = _load("mc_tokenized")
        tok = load_tokenizer(TOKENIZER_BPE)
        sent = {tuple(p): w["response"]["choices"][i]["logprobs"]
                for w in wire for i, p in enumerate(w["request"]["prompt"])}
        cut = 0
        for rows in samples.values():
            for row in rows:
                for name, args in row["arguments"].items():
                    pair = tokens.encode_pair(tok, args["arg_0"], args["arg_1"],
                                              add_bos_token=True)
                    ids, ctxlen = tokens.loglikelihood_input(*pair, max_length=15)
                    cut += len(ids) < len(pair[0]) + len(pair[1])
                    lp = sent[tuple(ids)]["token_logprobs"][ctxlen:-1]
                    saved = tokens.saved_loglikelihood(row["resps"][int(name[9:])][0])
                    assert saved[0] == sum(lp), (row["doc_id"], name)
        assert cut, "max_length cut no request"
    print("token-id wire prompts agree with replay_server.saved.tokens and the samples files")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=[],
                    help="tokenizer_bpe tokenized_gen mc_tokenized (default: all)")
    ap.add_argument("--keep-tmp", action="store_true")
    a = ap.parse_args()
    only = set(a.only)
    tmp = Path(tempfile.mkdtemp(prefix="token-data-"))
    env = mhd.offline_env(tmp)
    try:
        if not only or "tokenizer_bpe" in only:
            build_bpe_tokenizer()
        if not only or "tokenized_gen" in only:
            run_case("tokenized_gen", GEN_CASE, tmp, env)
        if not only or "mc_tokenized" in only:
            run_case("mc_tokenized", MC_CASE, tmp, env)
        check()
    finally:
        if a.keep_tmp:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
