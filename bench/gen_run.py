"""Write a synthetic saved run of realistic size, for the benchmark.

Each record is a chat (or completion) exchange shaped like vLLM's: about 1.5 KB of
messages (a system prompt and a few-shot user turn) and a 1 KB answer with usage, so that
load time, memory and request throughput are measured on bodies of the real size.

    python bench/gen_run.py OUT.jsonl --records 100000 [--completions-share 0.2]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson

MODEL = "bench/model"
WORDS = ("the of and to in is was that for on with as by at from it an be this are or "
         "which answer question number value result step first then therefore total sum "
         "product each per more less than equal apples oranges train speed hours minutes").split()


def text(rng: random.Random, size: int) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def chat_record(i: int, rng: random.Random) -> dict[str, object]:
    messages = [
        {"role": "system", "content": "You are a careful assistant. " + text(rng, 300)},
        {"role": "user", "content": f"Question {i}: " + text(rng, 1100) + "\nAnswer:"},
    ]
    answer = text(rng, 1000) + f" The answer is {i}."
    return {
        "replay_record": 1, "endpoint": "/v1/chat/completions", "model": MODEL,
        "request": {"model": MODEL, "messages": messages, "max_tokens": 512,
                    "temperature": 0.0},
        "response": {
            "id": f"chatcmpl-{i:08x}", "object": "chat.completion", "created": 1767225600,
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer,
                                                 "refusal": None, "reasoning": None},
                         "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
            "system_fingerprint": "vllm-0.33.0-bench",
            "usage": {"prompt_tokens": 300, "completion_tokens": 220, "total_tokens": 520}},
        "source": {"harness": "bench", "instance": f"doc-{i}"},
    }


def completion_record(i: int, rng: random.Random) -> dict[str, object]:
    prompt = f"Question {i}: " + text(rng, 1400) + "\nAnswer:"
    return {
        "replay_record": 1, "endpoint": "/v1/completions", "model": MODEL,
        "request": {"model": MODEL, "prompt": prompt, "max_tokens": 256, "temperature": 0.0},
        "response": {
            "id": f"cmpl-{i:08x}", "object": "text_completion", "created": 1767225600,
            "model": MODEL,
            "choices": [{"index": 0, "text": " " + text(rng, 1000), "logprobs": None,
                         "finish_reason": "stop", "stop_reason": None}],
            "usage": {"prompt_tokens": 320, "completion_tokens": 220, "total_tokens": 540}},
        "source": {"harness": "bench", "instance": f"doc-{i}"},
    }


def write(path: Path, records: int, completions_share: float, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("wb") as f:
        for i in range(records):
            make = completion_record if rng.random() < completions_share else chat_record
            f.write(orjson.dumps(make(i, rng)) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument("--records", type=int, default=100_000, help="how many records")
    parser.add_argument("--completions-share", type=float, default=0.2,
                        help="share of /v1/completions records (the rest are chat)")
    args = parser.parse_args()
    write(args.out, args.records, args.completions_share)


if __name__ == "__main__":
    main()
