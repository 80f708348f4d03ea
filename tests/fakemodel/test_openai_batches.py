"""The fake model's OpenAI Files and Batches APIs (openai_batches.py), through the openai SDK
as a user calls it, and inspect_ai's `--batch` with an `openai/` model pointed at the fake."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types import Batch

from tests.fakemodel.server import create_app
from tests.harnesses.commands import BIN, offline_env
from tests.support import ROOT, running

pytestmark = pytest.mark.http
MODEL = "tiny-model"
CHAT = "/v1/chat/completions"


def ask(question: str) -> dict[str, Any]:
    return {"model": MODEL, "temperature": 0,
            "messages": [{"role": "user", "content": question}]}


def line(custom_id: str, body: dict[str, Any], url: str = CHAT) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def jsonl(lines: list[Any]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in lines)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running(create_app([MODEL])) as base:
        yield base


@pytest.fixture
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url, api_key="any-key") as made:
        yield made


def submit(client: openai.OpenAI, lines: bytes, endpoint: str = CHAT) -> Batch:
    uploaded = client.files.create(file=("input.jsonl", lines), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint=endpoint,  # type: ignore[arg-type]
                                 completion_window="24h", metadata={"run": "test"})


def polled(client: openai.OpenAI, batch: Batch) -> list[Batch]:
    """Each retrieve until the batch ends, as a client's poll loop sees it."""
    seen = [batch]
    while seen[-1].status not in ("completed", "failed", "cancelled", "expired"):
        assert len(seen) < 10, [b.status for b in seen]
        seen.append(client.batches.retrieve(batch.id))
    return seen


def test_each_line_is_answered_as_the_same_request_alone(client: openai.OpenAI) -> None:
    questions = {f"q{i}": f"What is {i} + 7?" for i in range(3)}
    batch = submit(client, jsonl([line(k, ask(q)) for k, q in questions.items()]
                                 + [line("no-messages", {"model": MODEL})]))
    seen = polled(client, batch)
    assert [b.status for b in seen] == ["validating", "in_progress", "finalizing", "completed"]
    done = seen[-1]
    assert done.request_counts is not None and done.request_counts.model_dump() == {
        "total": 4, "completed": 3, "failed": 1}
    assert done.completed_at and done.metadata == {"run": "test"} and done.errors is None
    assert done.output_file_id and done.error_file_id
    output = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    for got in output:
        alone = client.chat.completions.create(**ask(questions[got["custom_id"]]))
        assert got["response"]["status_code"] == 200 and got["error"] is None
        assert got["response"]["body"]["choices"][0]["message"]["content"] == \
            alone.choices[0].message.content
    assert sorted(got["custom_id"] for got in output) == sorted(questions)
    (failed,) = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert failed["custom_id"] == "no-messages" and failed["response"]["status_code"] == 400
    assert failed["response"]["body"]["error"]["param"] == "messages"


def test_completions_and_responses_lines_are_answered_by_their_routes(
        client: openai.OpenAI) -> None:
    for endpoint, body in (("/v1/completions", {"model": MODEL, "prompt": "What is 3 + 4?",
                                                "temperature": 0}),
                           ("/v1/responses", {"model": MODEL, "input": "What is 3 + 4?",
                                              "temperature": 0})):
        done = polled(client, submit(client, jsonl([line("one", body, endpoint)]), endpoint))[-1]
        assert done.status == "completed" and done.output_file_id
        (got,) = client.files.content(done.output_file_id).text.splitlines()
        assert "The answer is" in got


def test_a_malformed_input_file_fails_the_batch_naming_each_line(client: openai.OpenAI) -> None:
    lines = [b"not json", json.dumps(line("a", ask("What is 1 + 1?"))).encode(), b"",
             json.dumps(line("a", ask("What is 2 + 2?"))).encode(),
             json.dumps(line("b", ask("What is 3 + 3?"), "/v1/completions")).encode(),
             json.dumps({"custom_id": "c", "method": "POST", "url": CHAT}).encode()]
    seen = polled(client, submit(client, b"\n".join(lines) + b"\n"))
    assert [b.status for b in seen] == ["validating", "failed"]
    assert seen[-1].errors is not None and seen[-1].errors.data is not None
    assert [(e.line, e.code, e.param) for e in seen[-1].errors.data] == [
        (1, "invalid_json_line", None), (4, "duplicate_custom_id", "custom_id"),
        (5, "mismatched_endpoint", "url"), (6, "missing_required_parameter", "body")]
    assert seen[-1].output_file_id is None and seen[-1].failed_at


def test_cancel_list_and_the_files_api(client: openai.OpenAI) -> None:
    batch = submit(client, jsonl([line("a", ask("What is 1 + 1?"))]))
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    assert polled(client, cancelling)[-1].status == "cancelled"
    assert polled(client, cancelling)[-1].output_file_id is None
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)
    assert batch.id in [b.id for b in client.batches.list(limit=2)]
    uploaded = client.files.retrieve(batch.input_file_id)
    assert uploaded.purpose == "batch" and uploaded.filename == "input.jsonl"
    assert uploaded.id in [f.id for f in client.files.list(purpose="batch")]
    assert client.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id="file-x", endpoint="/v1/embeddings",
                              completion_window="24h")


def inspect_batch(tmp_path: Path, model: str, env: dict[str, str],
                  *args: str) -> subprocess.CompletedProcess[str]:
    """inspect_ai's arithmetic task with `--batch`, polling every 0.2 s (BatchConfig)."""
    shutil.copytree(ROOT / "tests" / "data" / "gen" / "tasks", tmp_path / "tasks")
    config = tmp_path / "batch.json"
    config.write_text(json.dumps({"size": 10, "send_delay": 0.2, "tick": 0.2}))
    return subprocess.run(
        [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model", model, *args,
         "--batch", str(config), "--temperature", "0", "--display", "plain",
         "--log-dir", str(tmp_path / "logs")],
        env={**offline_env(tmp_path), **env}, cwd=tmp_path / "tasks", capture_output=True,
        text=True, timeout=300)


@pytest.mark.harness
@pytest.mark.slow
def test_inspect_batch_with_an_openai_model(tmp_path: Path) -> None:
    """inspect_ai `--batch` uploads its chat requests, creates a batch, polls it and reads
    the output file; each line is the chat request a plain run sends (the Responses API's
    batches need `-M responses_api=false`: inspect validates a batch's Responses body
    strictly, and the fake's vLLM-shaped usage lacks OpenAI's `cache_write_tokens`)."""
    from inspect_ai.log import read_eval_log

    log = tmp_path / "wire.jsonl"
    with running(create_app([MODEL], str(log))) as base:
        ran = inspect_batch(tmp_path, f"openai/{MODEL}", {"OPENAI_BASE_URL": base},
                            "-M", "responses_api=false")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (result,) = (read_eval_log(str(p)) for p in (tmp_path / "logs").glob("*.eval"))
    assert result.status == "success" and len(result.samples or []) == 6
    wire = [json.loads(x) for x in log.read_text().splitlines()]
    assert {w["path"] for w in wire} == {CHAT} and len(wire) == 7  # the tool call: 2 turns
