"""The fake model's Message Batches API (anthropic_batches.py), through the anthropic SDK as a
user calls it, and inspect_ai's `--batch` with an `anthropic/` model pointed at the fake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.messages import MessageBatch

from tests.fakemodel.server import create_app
from tests.fakemodel.test_openai_batches import inspect_batch
from tests.support import running

pytestmark = pytest.mark.http
MODEL = "claude-fake"


def params(question: str) -> dict[str, Any]:
    """A greedy request: the fake samples without `temperature: 0` (anthropic 2.17's
    `messages.create` takes no temperature, so a single request sends it in `extra_body`)."""
    return {"model": MODEL, "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": question}]}


@pytest.fixture(scope="module")
def root() -> Iterator[str]:
    with running(create_app([MODEL])) as base:
        yield base.removesuffix("/v1")


@pytest.fixture
def client(root: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=root, api_key="any-key") as made:
        yield made


def polled(client: anthropic.Anthropic, batch: MessageBatch) -> list[MessageBatch]:
    seen = [batch]
    while seen[-1].processing_status != "ended":
        assert len(seen) < 10, [b.processing_status for b in seen]
        seen.append(client.messages.batches.retrieve(batch.id))
    return seen


def test_each_request_is_answered_as_the_same_message_alone(client: anthropic.Anthropic,
                                                           root: str) -> None:
    questions = {f"q{i}": f"What is {i} + 7?" for i in range(3)}
    requests: list[Any] = [{"custom_id": k, "params": params(q)} for k, q in questions.items()]
    requests.append({"custom_id": "no-max-tokens", "params": {
        "model": MODEL, "messages": [{"role": "user", "content": "What is 1 + 1?"}]}})
    seen = polled(client, client.messages.batches.create(requests=requests))
    assert [b.processing_status for b in seen] == ["in_progress", "in_progress", "ended"]
    assert seen[1].request_counts.processing == 4 and seen[1].results_url is None
    ended = seen[-1]
    assert ended.request_counts.model_dump() == {
        "processing": 0, "succeeded": 3, "errored": 1, "canceled": 0, "expired": 0}
    assert ended.ended_at and ended.results_url == f"{root}/v1/messages/batches/{ended.id}/results"
    results = {r.custom_id: r.result for r in client.messages.batches.results(ended.id)}
    for custom_id, question in questions.items():
        greedy = params(question)
        alone = client.messages.create(extra_body={"temperature": greedy.pop("temperature")},
                                       **greedy)
        got = results[custom_id]
        assert got.type == "succeeded" and got.message.content == alone.content
    errored = results["no-max-tokens"]
    assert errored.type == "errored" and errored.error.error.type == "invalid_request_error"
    assert "max_tokens" in errored.error.error.message


@pytest.mark.parametrize(("requests", "field"), [
    ([], "requests"),
    ([{"custom_id": "a b", "params": {}}], "requests.0.custom_id"),
    ([{"custom_id": "a", "params": {}}, {"custom_id": "a", "params": {}}],
     "requests.1.custom_id"),
    ([{"custom_id": "a", "params": "hello"}], "requests.0.params")])
def test_a_malformed_batch_is_refused_whole(client: anthropic.Anthropic, requests: Any,
                                            field: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.batches.create(requests=requests)
    assert str(refused.value.body["error"]["message"]).startswith(field + ":")  # type: ignore[index]


def test_cancel_list_and_delete(client: anthropic.Anthropic) -> None:
    one: list[Any] = [{"custom_id": "a", "params": params("What is 1 + 1?")}]
    batch = client.messages.batches.create(requests=one)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(batch.id)
    canceling = client.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at
    ended = polled(client, canceling)[-1]
    assert ended.request_counts.canceled == 1
    assert [r.result.type for r in client.messages.batches.results(batch.id)] == ["canceled"]
    assert batch.id in [b.id for b in client.messages.batches.list(limit=2)]
    assert client.messages.batches.delete(batch.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


@pytest.mark.harness
@pytest.mark.slow
def test_inspect_batch_with_an_anthropic_model(tmp_path: Path) -> None:
    """inspect_ai `--batch` creates Message Batches, polls them and reads their results;
    each request is the Messages request a plain run sends."""
    from inspect_ai.log import read_eval_log

    log = tmp_path / "wire.jsonl"
    with running(create_app([MODEL], str(log))) as base:
        ran = inspect_batch(tmp_path, f"anthropic/{MODEL}", {
            "ANTHROPIC_BASE_URL": base.removesuffix("/v1"), "ANTHROPIC_API_KEY": "any-key"})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (result,) = (read_eval_log(str(p)) for p in (tmp_path / "logs").glob("*.eval"))
    assert result.status == "success" and len(result.samples or []) == 6
    wire = [json.loads(x) for x in log.read_text().splitlines()]
    assert {w["path"] for w in wire} == {"/v1/messages"} and len(wire) == 7
