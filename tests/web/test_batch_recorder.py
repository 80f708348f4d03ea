"""Recording batch jobs (web/batch_recorder.py): the openai and anthropic SDKs run a batch
through the recorder in front of the fake model's batch APIs; each line is saved as the
record of its endpoint, as if sent alone (an error-file or `errored` line an unusable
record saying why), so that the recording answers the same batch again, and the same
requests sent one by one; and a run recorded request by request answers a batch."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import anthropic
import httpx
import openai
import orjson
import pytest

from replay_server.paths import CHAT_PATH, MESSAGES_PATH
from replay_server.saved.writer import RecordWriter
from replay_server.web.recorder import Recorder, create_record_app
from tests.fakemodel.server import create_app as fake_model
from tests.support import running, serving

pytestmark = pytest.mark.http
GPT, CLAUDE = "tiny-model", "claude-fake"
ENDED = ("completed", "failed", "cancelled", "expired")
CHAT: Final = "/v1/chat/completions"  # (the SDK's literal type)


def chat(question: str) -> dict[str, Any]:
    return {"model": GPT, "temperature": 0, "messages": [{"role": "user", "content": question}]}


def message(question: str) -> dict[str, Any]:
    return {"model": CLAUDE, "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": question}]}


# a line the upstream refuses (the fake's rate limit): its error file's line
QUESTIONS = {"q0": "What is 2 + 3?", "q1": "What is 4 * 5?", "refused": "[fault: 429] 1 + 1?"}


def openai_batch(client: openai.OpenAI, questions: dict[str, str]) -> dict[str, Any]:
    """Upload, create, retrieve until it ends, download: each line's `response`."""
    lines = [{"custom_id": k, "method": "POST", "url": CHAT, "body": chat(q)}
             for k, q in questions.items()]
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT,
                                  completion_window="24h")
    while batch.status not in ENDED:
        batch = client.batches.retrieve(batch.id)
    out: dict[str, Any] = {}
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id is not None:
            for line in client.files.content(file_id).text.splitlines():
                got = json.loads(line)
                out[got["custom_id"]] = got["response"]
    return out


def anthropic_batch(client: anthropic.Anthropic, questions: dict[str, str]) -> dict[str, Any]:
    """Create, retrieve until it ends, its results: each request's `result`."""
    requests: Any = [{"custom_id": k, "params": message(q)} for k, q in questions.items()]
    batch = client.messages.batches.create(requests=requests)
    while batch.processing_status != "ended":
        batch = client.messages.batches.retrieve(batch.id)
    return {r.custom_id: r.result.model_dump(exclude_unset=True)
            for r in client.messages.batches.results(batch.id)}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(fake_model([GPT, CLAUDE])) as url:
        yield url


@pytest.fixture
def recorded(upstream: str, tmp_path: Path) -> Iterator[tuple[Recorder, str]]:
    recorder = Recorder(upstream, RecordWriter(tmp_path / "batch.jsonl"))
    with running(create_record_app(recorder)) as url:
        yield recorder, url
    recorder.writer.close()


def saved(recorder: Recorder) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in recorder.writer.path.read_bytes().splitlines()]


def test_an_openai_batch_is_saved_line_by_line_and_replays_both_ways(
        recorded: tuple[Recorder, str]) -> None:
    recorder, url = recorded
    with openai.OpenAI(base_url=url, api_key="sk-secret-not-saved") as client:
        original = openai_batch(client, QUESTIONS)
    assert recorder.counts["recorded"] == 3, recorder.summary()
    assert original["refused"]["status_code"] == 429
    records = {r["request"]["messages"][0]["content"]: r for r in saved(recorder)}
    for custom_id, question in QUESTIONS.items():
        record = records[question]
        assert record["endpoint"] == CHAT_PATH and record["request"] == chat(question)
        assert record["source"]["custom_id"] == custom_id
        if custom_id != "refused":
            assert record["response"] == original[custom_id]["body"]
    assert records[QUESTIONS["refused"]]["response"] is None
    assert "status 429" in records[QUESTIONS["refused"]]["unusable"]
    assert b"sk-secret-not-saved" not in recorder.writer.path.read_bytes()
    assert "batch lines" not in recorder.summary()  # (none left waiting for results)

    answered = {k: q for k, q in QUESTIONS.items() if k != "refused"}
    with serving([recorder.writer.path]) as replay, openai.OpenAI(
            base_url=replay, api_key="x") as client:
        again = openai_batch(client, QUESTIONS)
        for custom_id, question in answered.items():
            assert again[custom_id] == {**original[custom_id],
                                        "request_id": again[custom_id]["request_id"]}
            alone = httpx.post(f"{replay}/chat/completions", json=chat(question))
            assert alone.json() == original[custom_id]["body"]
    assert again["refused"]["body"]["error"]["code"] == "replay_unusable"


def test_an_anthropic_batch_is_saved_line_by_line_and_replays_both_ways(
        recorded: tuple[Recorder, str]) -> None:
    recorder, url = recorded
    questions = {**QUESTIONS, "refused": "What is 1 + 1?"}
    with anthropic.Anthropic(base_url=url.removesuffix("/v1"),
                             api_key="sk-ant-secret-not-saved") as client:
        unanswerable: Any = [{"custom_id": "no-max-tokens", "params": {
            "model": CLAUDE, "messages": [{"role": "user", "content": "What is 9 - 1?"}]}}]
        batch = client.messages.batches.create(requests=unanswerable)
        while batch.processing_status != "ended":
            batch = client.messages.batches.retrieve(batch.id)
        assert batch.results_url == f"{url.removesuffix('/v1')}{MESSAGES_PATH}/batches/" \
            f"{batch.id}/results"  # the recorder's own: the SDK downloads through it
        (errored,) = client.messages.batches.results(batch.id)
        original = anthropic_batch(client, questions)
    assert errored.result.type == "errored"
    assert recorder.counts["recorded"] == 4, recorder.summary()
    records = {r["source"]["custom_id"]: r for r in saved(recorder)}
    assert records["no-max-tokens"]["response"] is None
    assert "max_tokens" in records["no-max-tokens"]["unusable"]
    for custom_id, question in questions.items():
        assert records[custom_id]["endpoint"] == MESSAGES_PATH
        assert records[custom_id]["request"] == message(question)
        assert records[custom_id]["response"] == original[custom_id]["message"]
    assert b"sk-ant-secret-not-saved" not in recorder.writer.path.read_bytes()

    with serving([recorder.writer.path]) as replay, anthropic.Anthropic(
            base_url=replay.removesuffix("/v1"), api_key="x") as client:
        assert anthropic_batch(client, questions) == original
        for custom_id, question in questions.items():
            alone = httpx.post(replay.removesuffix("/v1") + MESSAGES_PATH,
                               json=message(question))
            assert alone.json() == original[custom_id]["message"]


def test_lines_whose_results_never_came_through_are_said_in_the_summary(
        recorded: tuple[Recorder, str]) -> None:
    recorder, url = recorded
    with openai.OpenAI(base_url=url, api_key="k") as client:
        data = orjson.dumps({"custom_id": "a", "method": "POST", "url": CHAT,
                             "body": chat("What is 1 + 2?")}) + b"\n"
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
        client.batches.create(input_file_id=uploaded.id, endpoint=CHAT,
                              completion_window="24h")
    assert recorder.counts["recorded"] == 0
    assert "1 batch lines whose results never came through the recorder (not saved)" in \
        recorder.summary()


def test_a_run_recorded_request_by_request_answers_a_batch(
        recorded: tuple[Recorder, str]) -> None:
    recorder, url = recorded
    answered = {k: q for k, q in QUESTIONS.items() if k != "refused"}
    with openai.OpenAI(base_url=url, api_key="k") as client:
        alone = {k: client.chat.completions.create(**chat(q)).model_dump(exclude_unset=True)
                 for k, q in answered.items()}
    with anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k") as claude:
        messages = {}
        for k, q in answered.items():
            greedy = message(q)
            temperature = greedy.pop("temperature")
            messages[k] = claude.messages.create(**greedy, extra_body={
                "temperature": temperature}).model_dump(exclude_unset=True)
    with serving([recorder.writer.path]) as replay:
        with openai.OpenAI(base_url=replay, api_key="x") as client:
            batch = openai_batch(client, answered)
        with anthropic.Anthropic(base_url=replay.removesuffix("/v1"), api_key="x") as claude:
            results = anthropic_batch(claude, answered)
    for k in answered:
        assert batch[k]["body"] == alone[k]
        assert results[k] == {"type": "succeeded", "message": messages[k]}


def test_an_anthropic_batch_line_is_saved_with_the_create_requests_beta(
        recorded: tuple[Recorder, str]) -> None:
    """A beta the create request names applies to each of its requests (as upstream, and
    as the replay side reads it: `wire.batches.anthropic.request_headers`), but for the
    batch API's own, which a request sent alone never carries."""
    recorder, url = recorded
    beta = "message-batches-2024-09-24, output-128k-2025-02-19"
    with anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k",
                             default_headers={"anthropic-beta": beta}) as client:
        original = anthropic_batch(client, {"q0": QUESTIONS["q0"]})
    assert b"message-batches" not in recorder.writer.path.read_bytes()
    with serving([recorder.writer.path]) as replay:
        alone = httpx.post(replay.removesuffix("/v1") + MESSAGES_PATH,
                           json=message(QUESTIONS["q0"]),
                           headers={"anthropic-beta": "output-128k-2025-02-19"})
        assert alone.json() == original["q0"]["message"]
        with anthropic.Anthropic(base_url=replay.removesuffix("/v1"), api_key="x",
                                 default_headers={"anthropic-beta": beta}) as client:
            assert anthropic_batch(client, {"q0": QUESTIONS["q0"]}) == original


def test_a_batch_created_ended_names_the_recorders_results(
        recorded: tuple[Recorder, str], tmp_path: Path) -> None:
    """An upstream may answer the create with the batch ended and its `results_url` set
    (the replay server does): that one too names the recorder, or the results would be
    fetched past it and never saved."""
    recorder, url = recorded
    with anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k") as client:
        anthropic_batch(client, {"q0": QUESTIONS["q0"]})
    with serving([recorder.writer.path]) as replay:
        again = Recorder(replay, RecordWriter(tmp_path / "again.jsonl"))
        with running(create_record_app(again)) as front:
            root = front.removesuffix("/v1")
            made = httpx.post(root + MESSAGES_PATH + "/batches", json={"requests": [
                {"custom_id": "q0", "params": message(QUESTIONS["q0"])}]}).json()
            assert made["results_url"] == f"{root}{MESSAGES_PATH}/batches/{made['id']}/results"
            httpx.get(made["results_url"]).raise_for_status()
        again.writer.close()
    assert again.counts["recorded"] == 1, again.summary()


def test_a_second_batch_of_one_upload_is_said_not_saved(
        recorded: tuple[Recorder, str], caplog: pytest.LogCaptureFixture) -> None:
    """Each line is saved once, then forgotten: a batch run again over the same input file
    saves nothing, and says so (counted, warned), never silently."""
    recorder, url = recorded
    with openai.OpenAI(base_url=url, api_key="k") as client:
        data = orjson.dumps({"custom_id": "a", "method": "POST", "url": CHAT,
                             "body": chat("What is 2 + 3?")}) + b"\n"
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
        for _ in range(2):
            batch = client.batches.create(input_file_id=uploaded.id, endpoint=CHAT,
                                          completion_window="24h")
            while batch.status not in ENDED:
                batch = client.batches.retrieve(batch.id)
            assert batch.output_file_id is not None
            client.files.content(batch.output_file_id).read()
    assert recorder.counts["recorded"] == 1, recorder.summary()
    assert recorder.counts["unrecordable"] == 1, recorder.summary()
    assert f"batch {batch.id}" in caplog.text and uploaded.id in caplog.text


def test_lines_a_failed_write_did_not_save_are_kept_for_the_next_download(
        upstream: str) -> None:
    """A write that fails (a full disk: /dev/full) is the recorder's 500, and the client
    downloads again: the lines are kept until saved, so the retry saves them, or the
    summary counts them as never saved (not silently forgotten)."""
    recorder = Recorder(upstream, RecordWriter(Path("/dev/full")))
    try:
        with running(create_record_app(recorder)) as url:
            with openai.OpenAI(base_url=url, api_key="k", max_retries=0) as client, \
                    pytest.raises(openai.InternalServerError):
                openai_batch(client, {"q0": QUESTIONS["q0"]})
            # the download, again, on a new connection: uvicorn closes the one whose
            # request raised, and a client reusing it may meet the reset first
            with openai.OpenAI(base_url=url, api_key="k", max_retries=0) as client, \
                    pytest.raises(openai.InternalServerError):
                client.files.content(next(iter(recorder.batches.results_of))).read()
    finally:
        recorder.writer.close()
    assert "1 batch lines whose results never came through" in recorder.summary()
