"""The batch protocols through the front door: a real uvicorn on a free port, the official
`openai` SDK (files.create, batches.create, retrieve, files.content, the error file, list
pagination) and `anthropic` SDK (messages.batches.create, retrieve, results, list, cancel,
delete), answered from saved records: each line's body byte-identical to what the same
request sent alone gets, a line that cannot be replayed an errored line, counted."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from replay_server.settings import Settings
from replay_server.web.app import create_app
from tests.support import (
    MODEL,
    assert_error,
    build,
    chat_record,
    chat_response,
    message_record,
    message_response,
    running,
)

pytestmark = pytest.mark.http

RECORDS = [
    chat_record("2+2?", chat_response("4", rid="chatcmpl-a"), line=1, max_tokens=5),
    chat_record("3+3?", chat_response("6", rid="chatcmpl-b"), line=2, max_tokens=5),
    message_record("capital of France?", message_response("Paris.", rid="msg_a"), line=3,
                   max_tokens=20),
    message_record("capital of Italy?", message_response("Rome.", rid="msg_b"), line=4,
                   max_tokens=20),
]


def chat_line(custom_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": [{"role": "user", "content": text}],
                     "max_tokens": 5, **extra}}


def jsonl(*lines: Any) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def params(text: str) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": text}]}


@pytest.fixture
def server() -> Iterator[tuple[str, Any]]:
    app = create_app(Settings(max_upload_size=4096, max_batches=3), build(RECORDS))
    with running(app) as url:
        yield url, app.state.replayer


@pytest.fixture
def oai(server: tuple[str, Any]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server[0], api_key="dummy", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(server: tuple[str, Any]) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server[0].removesuffix("/v1"), api_key="dummy",
                             max_retries=0) as client:
        yield client


def run_batch(client: openai.OpenAI, data: bytes) -> Any:
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    assert (uploaded.bytes, uploaded.purpose, uploaded.filename) == (len(data), "batch",
                                                                     "in.jsonl")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"run": "r1"})
    assert client.batches.retrieve(batch.id) == batch  # (ended at creation)
    return batch


def test_an_openai_batch_answers_each_line_as_the_request_alone(
        oai: openai.OpenAI, server: tuple[str, Any]) -> None:
    batch = run_batch(oai, jsonl(chat_line("q1", "2+2?"), chat_line("q2", "3+3?")))
    assert batch.status == "completed" and batch.metadata == {"run": "r1"}
    assert batch.request_counts is not None and batch.request_counts.model_dump() == {
        "total": 2, "completed": 2, "failed": 0}
    assert batch.in_progress_at == batch.finalizing_at == batch.completed_at \
        == batch.created_at and batch.error_file_id is None
    assert batch.output_file_id is not None
    lines = [orjson.loads(x) for x in oai.files.content(batch.output_file_id).content.splitlines()]
    assert [x["custom_id"] for x in lines] == ["q1", "q2"]
    alone = httpx.post(server[0] + "/chat/completions", json=chat_line("", "2+2?")["body"])
    assert orjson.dumps(lines[0]["response"]["body"]) == alone.content
    assert lines[0]["response"]["status_code"] == 200 and lines[0]["error"] is None
    status = server[1].status()["models"][MODEL]
    assert status["hits"] == 3 and status["replay_no_match"] == 0
    assert server[1].stats.in_flight() == 0  # (each call and line has its outcome)


def test_a_changed_prompt_is_an_errored_line_and_a_counted_miss(
        oai: openai.OpenAI, server: tuple[str, Any]) -> None:
    batch = run_batch(oai, jsonl(chat_line("q1", "2+2?"), chat_line("q2", "3+3 ?")))
    assert batch.status == "completed" and batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 1)
    assert batch.error_file_id is not None and batch.output_file_id is not None
    [line] = [orjson.loads(x) for x in oai.files.content(batch.error_file_id).content.splitlines()]
    assert line["custom_id"] == "q2" and line["response"]["status_code"] == 400
    assert line["response"]["body"]["error"]["code"] == "replay_no_match"
    output = oai.files.content(batch.output_file_id).content
    assert b"q2" not in output  # (never an invented body)
    assert server[1].stats.failed() == 1
    assert server[1].stats.misses[-1]["code"] == "replay_no_match"


def test_a_malformed_input_file_fails_the_batch_with_its_lines(
        oai: openai.OpenAI, server: tuple[str, Any]) -> None:
    data = jsonl(chat_line("q1", "2+2?")) + b"{not json\n" + jsonl(
        chat_line("q1", "3+3?"), {**chat_line("q3", "3+3?"), "url": "/v1/completions"},
        chat_line("q4", "2+2?", stream=True))
    batch = run_batch(oai, data)
    assert batch.status == "failed" and batch.failed_at == batch.created_at
    assert batch.errors is not None and batch.errors.data is not None
    found = [(e.line, e.code, e.param) for e in batch.errors.data]
    assert found == [(2, "invalid_json_line", None), (3, "duplicate_custom_id", "custom_id"),
                     (4, "invalid_request", "url"), (5, "invalid_request", "body.stream")]
    assert batch.output_file_id is None and server[1].stats.failed() == 1
    assert server[1].status()["models"][MODEL]["hits"] == 0  # (no line ran)


def test_files_and_batches_list_in_pages(oai: openai.OpenAI) -> None:
    made = [run_batch(oai, jsonl(chat_line("q", "2+2?"))).id for _ in range(3)]
    first = oai.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    assert [b.id for b in first.get_next_page().data] == made[::-1][2:]
    assert [b.id for b in oai.batches.list(limit=2)] == made[::-1]  # (every page)
    files = oai.files.list(purpose="batch")
    assert len(files.data) == 3
    assert oai.files.delete(files.data[0].id).deleted
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(files.data[0].id)


def test_the_caps_are_a_413_in_the_api_envelope(oai: openai.OpenAI,
                                                server: tuple[str, Any]) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        oai.files.create(file=("big.jsonl", io.BytesIO(b"x" * 5000)), purpose="batch")
    assert raised.value.status_code == 413
    for _ in range(3):
        run_batch(oai, jsonl(chat_line("q", "2+2?")))
    with pytest.raises(openai.APIStatusError) as raised:
        oai.files.create(file=("in.jsonl", io.BytesIO(b"{}")), purpose="batch")
    assert raised.value.status_code == 413 and "--max-batches" in raised.value.message
    assert server[1].stats.failed() == 2  # (an upload refused may have cost generations)


def test_errors_are_the_openai_envelope_without_retries(server: tuple[str, Any]) -> None:
    url = server[0]
    assert_error(httpx.get(url + "/batches/batch_nope"), 404, param="batch_id")
    assert_error(httpx.post(url + "/batches", json={"endpoint": "/v1/chat/completions",
                                                    "completion_window": "24h"}),
                 400, param="input_file_id")
    assert_error(httpx.post(url + "/files", content=b"{}"), 400)
    assert_error(httpx.get(url + "/batches", params={"limit": 0}), 400, param="limit")


def test_an_anthropic_batch_answers_each_request_as_alone(
        claude: anthropic.Anthropic, server: tuple[str, Any]) -> None:
    batch = claude.messages.batches.create(requests=[
        {"custom_id": "fr", "params": params("capital of France?")},  # type: ignore[typeddict-item]
        {"custom_id": "it", "params": params("capital of Italy ?")}])  # type: ignore[typeddict-item]
    assert batch.processing_status == "ended" and batch.ended_at == batch.created_at
    assert batch.request_counts.succeeded == 1 and batch.request_counts.errored == 1
    assert claude.messages.batches.retrieve(batch.id) == batch
    results = {r.custom_id: r.result for r in claude.messages.batches.results(batch.id)}
    alone = claude.messages.create(**params("capital of France?"))
    assert results["fr"].type == "succeeded" and results["fr"].message == alone
    assert results["it"].type == "errored"
    assert results["it"].error.error.message.startswith("replay_no_match")
    assert server[1].stats.failed() == 1 and server[1].stats.in_flight() == 0
    assert [b.id for b in claude.messages.batches.list()] == [batch.id]
    assert claude.messages.batches.cancel(batch.id).processing_status == "ended"
    assert claude.messages.batches.delete(batch.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.batches.retrieve(batch.id)


def test_an_anthropic_batch_that_streams_is_refused_whole(claude: anthropic.Anthropic,
                                                         server: tuple[str, Any]) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.messages.batches.create(requests=[
            {"custom_id": "fr", "params": {**params("capital of France?"), "stream": True}}])  # type: ignore[typeddict-item]
    assert "requests.0.params.stream" in raised.value.message
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert raised.value.body["type"] == "error"  # type: ignore[index]
    assert server[1].status()["models"][MODEL]["hits"] == 0
    # Anthropic's envelope below /v1/messages, whatever headers are sent
    gone = httpx.get(server[0] + "/messages/batches/msgbatch_nope")
    assert gone.status_code == 404 and gone.json()["type"] == "error"


def test_an_anthropic_result_holds_the_single_answer_s_bytes(
        claude: anthropic.Anthropic, server: tuple[str, Any]) -> None:
    made = claude.messages.batches.create(requests=[
        {"custom_id": "fr", "params": params("capital of France?")}])  # type: ignore[typeddict-item]
    root = server[0].removesuffix("/v1")
    raw = httpx.get(f"{root}/v1/messages/batches/{made.id}/results").content
    alone = httpx.post(f"{root}/v1/messages", json=params("capital of France?"),
                       headers={"anthropic-version": "2023-06-01"}).content
    assert raw == b'{"custom_id":"fr","result":{"type":"succeeded","message":' + alone + b"}}\n"


def test_a_big_upload_comes_back_byte_for_byte() -> None:
    """Over 1 MB (where a form reader would spool it to disk): read in memory, whole."""
    data = jsonl(*(chat_line(f"q{i}", "2+2?" + " " * 1000) for i in range(2000)))
    app = create_app(Settings(), build(RECORDS))
    with running(app) as url, openai.OpenAI(base_url=url, api_key="x") as client:
        uploaded = client.files.create(file=("big.jsonl", io.BytesIO(data)), purpose="batch")
        assert uploaded.bytes == len(data) > 2_000_000
        assert client.files.content(uploaded.id).content == data


def test_batches_refuse_several_workers() -> None:
    app = create_app(Settings(workers=2), build(RECORDS))
    with running(app) as url:
        error = assert_error(httpx.post(url + "/files", files={"file": ("a", b"{}")},
                                        data={"purpose": "batch"}), 400)
        assert "--workers 1" in error["message"]
