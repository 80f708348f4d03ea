"""inspect_ai logs of `--batch` runs (tests/data/inspect_ai/batch*, written by the real
harness against the fake model's batch APIs): the `openai/` provider's batches of chat
completions and the `anthropic/` provider's Message Batches. Their model events are those
of a plain run (the request each batch line carried, the answer its result line held), so
the inspect reader reads them as it reads a plain run's, with nothing of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from replay_server.index.loading import load
from replay_server.paths import CHAT_PATH, MESSAGES_PATH
from replay_server.saved.formats import LoadContext
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record, strip_transport

DATA = Path(__file__).parents[2] / "data" / "inspect_ai"
# case: (the model the log names, the endpoint of its calls)
CASES = {"batch": ("tiny-model", CHAT_PATH), "batch_anthropic": ("claude-fake", MESSAGES_PATH)}


def records(case: str) -> list[Record]:
    return list(read(plan([next((DATA / case).glob("*.eval"))]), LoadContext()))


def key(request: dict[str, Any]) -> bytes:
    return orjson.dumps(request, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_calls_are_read_as_a_plain_runs(case: str) -> None:
    model, endpoint = CASES[case]
    loaded = load([DATA / case], progress=False)
    run = loaded.index.models[model]
    assert (run.records, len(run.entries), run.unusable_records) == (7, 7, 0)
    assert not loaded.ctx.skipped
    assert {r.endpoint for r in records(case)} == {endpoint}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_record_is_a_batch_line_and_its_answer(case: str) -> None:
    """Every line the batches sent (the fake's wire log has each as the request it is) is
    one record, keyed on that very body, holding that line's answer."""
    saved = {key(r.request): r for r in records(case)}
    lines = (DATA / case / "wire.jsonl").read_text().splitlines()
    for line in map(json.loads, lines):
        record = saved.pop(key(strip_transport(line["request"])))
        assert record.response is not None and record.response["id"] == line["response"]["id"]
        if case == "batch":
            assert record.response["choices"][0]["message"]["content"] == \
                line["response"]["choices"][0]["message"]["content"]
        else:
            # (inspect logs the SDK's dump of the message: its null fields filled in)
            assert [(b["type"], b.get("text")) for b in record.response["content"]] == \
                [(b["type"], b.get("text")) for b in line["response"]["content"]]
    assert not saved
