"""Recording Anthropic's Messages API: the anthropic SDK through the recorder in front of the
fake model's Anthropic-shaped server, then the same session replayed: the same messages,
streams saved with their frames and replayed byte for byte, count_tokens, the
`anthropic-beta` header saved (and keyed), and no key written down."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import anthropic
import httpx
import orjson
import pytest

from replay_server.paths import COUNT_TOKENS_PATH, MESSAGES_PATH
from replay_server.saved.writer import RecordWriter
from replay_server.web.recorder import Recorder, create_record_app
from tests.fakemodel.server import create_app as fake_model
from tests.support import free_port, running, serving

pytestmark = pytest.mark.http
MODEL = "claude-fake"
THINK: Any = {"type": "enabled", "budget_tokens": 1024}
TOOLS: Any = [{"name": "calculator", "description": "adds", "input_schema": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(fake_model([MODEL])) as url:
        yield url


def session(client: anthropic.Anthropic) -> dict[str, Any]:
    """A harness-like session: plain, thinking, a tool call and its result, a stream with
    thinking, a beta header, count_tokens."""
    out: dict[str, Any] = {}
    out["plain"] = client.messages.create(model=MODEL, max_tokens=100,
                                          messages=ask("What is 2 + 3?")).model_dump()
    out["thinking"] = client.messages.create(model=MODEL, max_tokens=2048, thinking=THINK,
                                             messages=ask("What is 4 + 5?")).model_dump()
    call = client.messages.create(model=MODEL, max_tokens=100, tools=TOOLS,
                                  messages=ask("Use the calculator: what is 6 + 7?"))
    out["call"] = call.model_dump()
    blocks: Any = call.to_dict()["content"]
    turns: Any = [*ask("Use the calculator: what is 6 + 7?"),
                  {"role": "assistant", "content": blocks},
                  {"role": "user", "content": [{"type": "tool_result", "content": "13",
                                                "tool_use_id": blocks[0]["id"]}]}]
    out["result"] = client.messages.create(model=MODEL, max_tokens=100, tools=TOOLS,
                                           messages=turns).model_dump()
    with client.messages.stream(model=MODEL, max_tokens=2048, thinking=THINK,
                                messages=ask("What is 8 + 9?")) as stream:
        out["stream_text"] = list(stream.text_stream)
        out["stream"] = stream.get_final_message().model_dump()
    out["beta"] = client.messages.create(
        model=MODEL, max_tokens=100, messages=ask("What is 1 + 1?"),
        extra_headers={"anthropic-beta": "context-1m-2025-08-07"}).model_dump()
    out["count"] = client.messages.count_tokens(model=MODEL,
                                                messages=ask("What is 2 + 3?")).input_tokens
    return out


def test_record_then_replay_gives_identical_messages(upstream: str, tmp_path: Path) -> None:
    saved = tmp_path / "claude.jsonl"
    recorder = Recorder(upstream, RecordWriter(saved))
    with running(create_record_app(recorder)) as url, anthropic.Anthropic(
            base_url=url.removesuffix("/v1"), api_key="sk-ant-secret-not-saved") as client:
        original = session(client)
    recorder.writer.close()
    assert recorder.counts["recorded"] == 7, recorder.summary()
    lines = [orjson.loads(line) for line in saved.read_bytes().splitlines()]
    assert [r["endpoint"] for r in lines].count(COUNT_TOKENS_PATH) == 1
    streamed = [r for r in lines if "stream" in r]
    assert len(streamed) == 1 and streamed[0]["endpoint"] == MESSAGES_PATH
    assert any('"type": "ping"' in f for f in streamed[0]["stream"])  # the frames, as sent
    assert [r["request"].get("anthropic-beta") for r in lines].count(
        "context-1m-2025-08-07") == 1
    assert b"sk-ant-secret-not-saved" not in saved.read_bytes()
    assert original["thinking"]["content"][0]["type"] == "thinking"
    assert original["call"]["stop_reason"] == "tool_use"
    assert len(original["stream_text"]) > 2

    with serving([saved]) as replay_url, anthropic.Anthropic(
            base_url=replay_url.removesuffix("/v1"), api_key="x") as client:
        assert session(client) == original
        recorded = "".join(streamed[0]["stream"]).encode()
        body = {**streamed[0]["request"], "stream": True}
        again = httpx.post(replay_url.removesuffix("/v1") + MESSAGES_PATH, json=body)
        assert again.content == recorded  # byte for byte
        # the beta header is part of the key: without it, that prompt is a miss
        with pytest.raises(anthropic.BadRequestError, match="replay_no_match"):
            client.messages.create(model=MODEL, max_tokens=100, messages=ask("What is 1 + 1?"))


def test_the_recorders_own_errors_are_in_anthropics_envelope(tmp_path: Path) -> None:
    """An unreachable upstream (502, retryable: no `x-should-retry: false`) and the
    recorder's own failure (a full disk: 500) answer an Anthropic request in its envelope."""
    recorder = Recorder(f"http://127.0.0.1:{free_port()}", RecordWriter(tmp_path / "c.jsonl"))
    with running(create_record_app(recorder)) as url, anthropic.Anthropic(
            base_url=url.removesuffix("/v1"), api_key="k", max_retries=0) as client:
        with pytest.raises(anthropic.InternalServerError) as unreachable:
            client.messages.create(model=MODEL, max_tokens=10, messages=ask("2 + 3?"))
        listed = httpx.get(url + "/models", headers={"anthropic-version": "2023-06-01"})
    recorder.writer.close()
    assert unreachable.value.status_code == 502
    assert "x-should-retry" not in unreachable.value.response.headers
    for body in (unreachable.value.body, listed.json()):
        assert body == {"type": "error", "error": {"type": "api_error", "message": ANY}}
        assert "could not reach the upstream server" in body["error"]["message"]


def test_a_recorder_that_cannot_save_answers_in_anthropics_envelope(upstream: str,
                                                                    tmp_path: Path) -> None:
    recorder = Recorder(upstream, RecordWriter(tmp_path / "c.jsonl"))
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC, a full disk
    os.dup2(full, recorder.writer.fd)
    os.close(full)
    with running(create_record_app(recorder)) as url:
        reply = httpx.post(url + "/messages", headers={"x-api-key": "k"}, json={
            "model": MODEL, "max_tokens": 10, "messages": ask("What is 2 + 3?")})
    recorder.writer.close()
    assert reply.status_code == 500 and reply.headers["x-should-retry"] == "false"
    assert reply.json() == {"type": "error", "error": {"type": "api_error", "message": ANY}}
    assert "OSError" in reply.json()["error"]["message"]
