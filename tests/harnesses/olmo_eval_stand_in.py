"""A stand-in for olmo-eval's `vllm_server` provider (olmo-eval needs Python >= 3.12 and
cannot be installed here): it makes exactly the HTTP calls the provider and its metrics
collector make for each instance, with the same bodies and the same failure tolerance.
Sources, allenai/olmo-eval at e8b88f19 (tests/data/olmo_eval/SOURCE.md), under
src/olmo_eval/inference/:

- the generation: the bodies in EXPECTED (expected_requests.jsonl), which the real
  openai-python sent for the kwargs `VLLMServerProvider._generate_chat` and
  `_generate_completion` build; text = `choice.message.content or ""` (chat) or
  `choice.text`;
- the usage metadata: chat, `if usage: metadata["prompt_tokens"] = usage.prompt_tokens;
  metadata["completion_tokens"] = usage.completion_tokens` (providers/vllm_server.py,
  `_generate_chat`); completions, only the counts that are not None
  (`_completion_usage_metadata`);
- the token counts (metrics/core/collector.py, `_build_request_metrics`,
  `_count_prompt_tokens`, `_count_output_tokens`): a count the metadata lacks (0) is
  asked of the tokenizer, `len(tokenizer.encode(request.prompt))`, or for messages of
  `" ".join(m["content"] ...)`; an output's, of `len(tokenizer.encode(output.text))` when
  it has no logprobs and a text; any exception falls back to a word estimate
  (`len(text.split()) * 4 // 3`);
- the tokenizer: `RemoteTokenizer.encode` (providers/vllm_server.py) POSTs
  `{"model", "prompt", "add_special_tokens": True}` to the base URL without `/v1`, plus
  `/tokenize`, with a plain httpx.Client(timeout=30.0), `raise_for_status()`, and reads
  `tokens`.

Usage: python -m tests.harnesses.olmo_eval_stand_in EXPECTED OUT (the base URL from
OPENAI_BASE_URL); OUT gets one JSON line per instance: its source, texts and counts.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from typing import Any

import httpx
import openai


class RemoteTokenizer:
    def __init__(self, base_url: str, model: str) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.client = httpx.Client(timeout=30.0)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        response = self.client.post(f"{self.base_url}/tokenize", json={
            "model": self.model, "prompt": text, "add_special_tokens": add_special_tokens})
        response.raise_for_status()
        tokens: list[int] = response.json().get("tokens", [])
        return tokens


def _estimate(text: str) -> int:
    return len(text.split()) * 4 // 3


def count(tokenizer: RemoteTokenizer, text: str) -> tuple[int, bool]:
    """The collector's count of a text: the tokenizer's, else (any failure) an estimate;
    and whether the tokenizer answered."""
    try:
        return len(tokenizer.encode(text)), True
    except Exception:  # the collector's `except Exception: pass`
        return _estimate(text), False


def instance(client: openai.OpenAI, tokenizer: RemoteTokenizer, path: str,
             body: dict[str, Any]) -> dict[str, Any]:
    chat = path.endswith("/chat/completions")
    create: Any = client.chat.completions.create if chat else client.completions.create
    known = set(inspect.signature(create).parameters)
    response = create(**{k: v for k, v in body.items() if k in known},
                      extra_body={k: v for k, v in body.items() if k not in known})
    usage = response.usage
    metadata: dict[str, Any] = {}
    if chat and usage:
        metadata = {"prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens}
    elif usage:
        metadata = {k: v for k, v in (("prompt_tokens", usage.prompt_tokens),
                                      ("completion_tokens", usage.completion_tokens))
                    if v is not None}
    texts = [(c.message.content or "") if chat else c.text for c in response.choices]
    prompt_tokens = metadata.get("prompt_tokens", 0)
    completion_tokens = metadata.get("completion_tokens", 0) * len(texts)
    answered = []
    if prompt_tokens == 0:
        prompt: str = body["prompt"] if not chat else " ".join(
            m.get("content", "") for m in body["messages"] if isinstance(m.get("content"), str))
        prompt_tokens, ok = count(tokenizer, prompt)
        answered.append(ok)
    if completion_tokens == 0:
        for text in texts:  # (no logprobs come back from a replay)
            if text:
                n, ok = count(tokenizer, text)
                completion_tokens += n
                answered.append(ok)
    return {"texts": texts, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "tokenizer_answered": answered}


def main(expected: str, out: str) -> None:
    base_url = os.environ["OPENAI_BASE_URL"]
    client = openai.OpenAI(base_url=base_url, api_key=os.environ["OPENAI_API_KEY"],
                           max_retries=0)
    with open(expected) as f, open(out, "w") as sink:
        for line in f:
            case = json.loads(line)
            tokenizer = RemoteTokenizer(base_url, case["request"]["model"])
            got = instance(client, tokenizer, case["path"], case["request"])
            sink.write(json.dumps({"source": case["source"], **got}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
