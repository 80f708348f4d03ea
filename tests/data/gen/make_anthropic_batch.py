#!/usr/bin/env python3
"""Regenerate tests/data/anthropic_batch/: two Message Batches, as a user of the anthropic
SDK keeps them, made against the fake model (tests/fakemodel, its Message Batches API).

    .venv/bin/python tests/data/gen/make_anthropic_batch.py   # the project's venv (client extra)

A user keeps what they sent and what came back: the requests, one `{"custom_id", "params"}`
line each (the elements of `messages.batches.create(requests=...)`, as the API's docs build
them), and the results file downloaded from the batch's `results_url` as the API serves it
(JSONL, lines in any order). `arith` ends with four answers and one `errored` request (no
`max_tokens`); `canceled` is canceled before it ends, so its one request comes back
`canceled`. The fake answers deterministically (greedy requests), so running this again
writes the same answers; ids and timestamps differ. Nothing but 127.0.0.1 is contacted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import anthropic  # noqa: E402
import httpx  # noqa: E402

from tests.fakemodel.server import create_app  # noqa: E402
from tests.support import running  # noqa: E402

OUT = REPO / "tests" / "data" / "anthropic_batch"
MODEL = "claude-fake"
KEY = "any-key"


def ask(question: str, **more: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": question}], **more}


ARITH: list[dict[str, Any]] = [
    {"custom_id": "arith-0", "params": ask("What is 12 + 7?")},
    {"custom_id": "arith-1", "params": ask("What is 6 * 7?", system="Answer briefly.")},
    {"custom_id": "arith-2", "params": ask("What is 9 - 4?", stop_sequences=["is"])},
    {"custom_id": "arith-3", "params": {**ask("What is 20 / 5?"), "max_tokens": 2}},
    {"custom_id": "arith-no-max-tokens", "params": {
        "model": MODEL, "temperature": 0,
        "messages": [{"role": "user", "content": "What is 1 + 1?"}]}},
]
CANCELED: list[dict[str, Any]] = [{"custom_id": "canceled-0", "params": ask("What is 3 + 3?")}]


def run_batch(client: anthropic.Anthropic, requests: list[Any], cancel: bool) -> bytes:
    """Create the batch, poll it until it ends, and download its results file."""
    batch = client.messages.batches.create(requests=requests)
    if cancel:
        batch = client.messages.batches.cancel(batch.id)
    while batch.processing_status != "ended":
        batch = client.messages.batches.retrieve(batch.id)
    assert batch.results_url
    got = httpx.get(batch.results_url, headers={"x-api-key": KEY,
                                                "anthropic-version": "2023-06-01"})
    got.raise_for_status()
    return got.content


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with running(create_app([MODEL])) as url, \
            anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key=KEY) as client:
        for name, requests, cancel in (("arith", ARITH, False), ("canceled", CANCELED, True)):
            results = run_batch(client, requests, cancel)
            (OUT / f"{name}_requests.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in requests))
            (OUT / f"{name}_results.jsonl").write_bytes(results)
            print(f"{name}: {len(requests)} requests, results {len(results)} bytes")


if __name__ == "__main__":
    main()
