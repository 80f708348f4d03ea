"""lm-evaluation-harness: the commands of the cases in tests/data/gen/README.md, and
the scores read back from lm-eval's own files (results_*.json, samples_*.jsonl)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harnesses.commands import BIN, MODEL

SYSTEM = "You are a helpful math assistant. End with 'The answer is N.'"
BASE = "{base_url}"  # stands for the server's /v1 URL in a command line


@dataclass(frozen=True)
class Case:
    model: str
    task: str
    model_args: str
    extra: tuple[str, ...] = ()

    @property
    def endpoint(self) -> str:
        return "chat/completions" if "chat" in self.model else "completions"

    def command(self, base_url: str, out: Path) -> list[str]:
        args = f"model={MODEL},base_url={base_url}/{self.endpoint},max_retries=1,{self.model_args}"
        return [str(BIN / "lm_eval"), "run", "--model", self.model, "--model_args", args,
                "--tasks", self.task, "--include_path", ".", "--output_path", str(out),
                "--log_samples", *self.extra]


CASES = {
    "chat_repeats": Case("local-chat-completions", "arith_chat_sampled", "num_concurrent=1",
                         ("--apply_chat_template", "--system_instruction", SYSTEM)),
    "completions_batch": Case("local-completions", "arith_gen",
                              "tokenizer=../tokenizer,tokenizer_backend=huggingface,"
                              "tokenized_requests=False", ("--batch_size", "4")),
    # local-completions' default, tokenized_requests=True: token ids on the wire, text in
    # the samples file (rescored from it with the tokenizer)
    "completions_tokenized": Case("local-completions", "arith_gen",
                                  "tokenizer=../tokenizer,tokenizer_backend=huggingface",
                                  ("--batch_size", "4")),
    "loglikelihood_mc": Case("local-completions", "arith_mc",
                             "tokenizer=../tokenizer,tokenizer_backend=huggingface",
                             ("--batch_size", "2")),
    # loglikelihood_rolling (wikitext-style perplexity) on local text, windows of 8 tokens:
    # three documents share their first window, one spans five
    "perplexity": Case("local-completions", "ppl_text",
                       "tokenizer=../tokenizer,tokenizer_backend=huggingface,max_length=10",
                       ("--batch_size", "2")),
}


# The lm-eval side of the cross-harness port check (inspect_ai's side: tasks/port_arith.py).
PORT_CASE = Case("local-chat-completions", "arith_chat_greedy", "num_concurrent=1",
                 ("--apply_chat_template", "--system_instruction", SYSTEM))


def under_run(command: list[str]) -> list[str]:
    """`command` as one `sh -c` line for `replay-server run`, with the server's URL taken
    from the OPENAI_BASE_URL that `run` sets (lm-eval reads its URL from --model_args)."""
    line = " ".join(f'"{a.replace(BASE, "$OPENAI_BASE_URL")}"' if BASE in a
                    else shlex.quote(a) for a in command)
    return ["sh", "-c", line]


@dataclass
class Scores:
    results: dict[str, Any]  # results_*.json: "results"[task]
    samples: list[dict[str, Any]]  # samples_*.jsonl rows, as lm-eval wrote them
    printed: list[str]  # the results table lm-eval printed
    dir: Path  # the --output_path

    def metric(self, name: str) -> float:
        value: float = self.results[name]
        return value

    def per_doc(self) -> dict[tuple[int, str], tuple[Any, Any]]:
        """(doc_id, filter) -> (resps, filtered_resps): every answer lm-eval got."""
        return {(s["doc_id"], s["filter"]): (s["resps"], s["filtered_resps"])
                for s in self.samples}


def read_scores(out: Path, task: str, output: str) -> Scores:
    results = [json.loads(p.read_text()) for p in out.glob("*/results_*.json")]
    samples = list(out.glob(f"*/samples_{task}_*.jsonl"))
    assert len(results) == 1 and len(samples) == 1, (out, output[-3000:])
    rows = [json.loads(line) for line in samples[0].read_text().splitlines()]
    printed = [line for line in output.splitlines() if line.startswith("|")]
    return Scores(results[0]["results"][task], rows, printed, out)
