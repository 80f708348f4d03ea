"""Write a synthetic saved run of realistic size, for the benchmark.

Each record is a chat (or completion, or Responses API) exchange shaped like vLLM's: about
1.5 KB of messages (a system prompt and a few-shot user turn) and a 1 KB answer with usage,
so that load time, memory and request throughput are measured on bodies of the real size.
A share of the chat records can be recorded streams: their frames saved as a recording
saves them (one delta per word piece, as vLLM sends about one per token).

    python bench/gen_run.py OUT.jsonl --records 100000 [--completions-share 0.2]
        [--responses-share 0] [--recorded-streams-share 0]
    python bench/gen_run.py OUT.jsonl --records 10000000 --short
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson

from replay_server.wire.chat import stream_in, stream_out

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


def recorded_stream_record(i: int, rng: random.Random) -> dict[str, object]:
    """A chat exchange recorded streamed (no usage chunk asked for): its frames, and the
    body they aggregate to."""
    record = chat_record(i, rng)
    response = record["response"]
    assert isinstance(response, dict)
    frames = list(stream_out.STREAM.chunks({**response, "usage": None}, False))
    aggregator = stream_in.aggregator()
    aggregator.feed(b"".join(frames))
    return {**record, "response": aggregator.result(),
            "stream": [f.decode() for f in frames]}


def responses_record(i: int, rng: random.Random) -> dict[str, object]:
    answer = text(rng, 1000) + f" The answer is {i}."
    request = {"model": MODEL, "instructions": "You are a careful assistant. " + text(rng, 300),
               "input": f"Question {i}: " + text(rng, 1100) + "\nAnswer:",
               "max_output_tokens": 512, "temperature": 0.0}
    return {
        "replay_record": 1, "endpoint": "/v1/responses", "model": MODEL, "request": request,
        "response": {
            "id": f"resp_{i:08x}", "object": "response", "created_at": 1767225600,
            "model": MODEL, "status": "completed", "incomplete_details": None,
            "instructions": request["instructions"], "temperature": 0.0, "top_p": 1.0,
            "max_output_tokens": 512, "tool_choice": "auto", "tools": [],
            "parallel_tool_calls": True, "previous_response_id": None, "text": None,
            "output": [{"id": f"msg_{i:08x}", "type": "message", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": answer,
                                     "annotations": [], "logprobs": None}]}],
            "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 220, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 520}},
        "source": {"harness": "bench", "instance": f"doc-{i}"},
    }


def short_record(i: int, rng: random.Random) -> dict[str, object]:
    """A short chat exchange, some 560 bytes: a one-line question and its answer (the runs
    of ten million records, where the count weighs, not the bytes)."""
    a, b = i % 89, i % 97
    return {
        "replay_record": 1, "endpoint": "/v1/chat/completions", "model": MODEL,
        "request": {"model": MODEL, "messages": [
            {"role": "user", "content": f"Question {i}: how many apples are {a} and {b}?"}],
            "max_tokens": 16, "temperature": 0.0},
        "response": {
            "id": f"chatcmpl-{i:08x}", "object": "chat.completion", "created": 1767225600,
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant",
                                                 "content": f"{a + b} apples."},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}},
        "source": {"harness": "bench", "instance": f"doc-{i}"},
    }


def write(path: Path, records: int, completions_share: float, seed: int = 0,
          responses_share: float = 0.0, recorded_streams_share: float = 0.0,
          short: bool = False) -> None:
    rng = random.Random(seed)
    with path.open("wb") as f:
        for i in range(records):
            if short:
                f.write(orjson.dumps(short_record(i, rng)) + b"\n")
                continue
            pick = rng.random()
            if pick < completions_share:
                make = completion_record
            elif pick < completions_share + responses_share:
                make = responses_record
            elif pick < completions_share + responses_share + recorded_streams_share:
                make = recorded_stream_record
            else:
                make = chat_record
            f.write(orjson.dumps(make(i, rng)) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument("--records", type=int, default=100_000, help="how many records")
    parser.add_argument("--completions-share", type=float, default=0.2,
                        help="share of /v1/completions records (the rest are chat)")
    parser.add_argument("--responses-share", type=float, default=0.0,
                        help="share of /v1/responses records")
    parser.add_argument("--recorded-streams-share", type=float, default=0.0,
                        help="share of chat records saved as recorded streams (frames)")
    parser.add_argument("--short", action="store_true",
                        help="short chat exchanges only (some 560 bytes each), no shares")
    args = parser.parse_args()
    write(args.out, args.records, args.completions_share, responses_share=args.responses_share,
          recorded_streams_share=args.recorded_streams_share, short=args.short)


if __name__ == "__main__":
    main()
