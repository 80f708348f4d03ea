"""Anthropic's Messages API through the front door: a real uvicorn on a free port, the
official `anthropic` SDK (sync, async, `messages.stream` and its final message,
count_tokens, the model list), and its error envelope on every failure path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from replay_server.paths import COUNT_TOKENS_PATH
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.wire.messages import stream_out
from tests.support import (
    MODEL,
    Counting,
    build,
    message_record,
    message_response,
    running,
)

pytestmark = pytest.mark.http

THINKING = {"type": "thinking", "thinking": "Two plus two is four.", "signature": "EqQBsig=="}
CALL = {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 2, "b": 2}}
TOOLS: Any = [{"name": "add", "description": "adds", "input_schema": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]
ANSWER = message_response(THINKING, "The answer is 4.", rid="msg_think")
TOOL_ANSWER = message_response(CALL, stop="tool_use", rid="msg_tool")
# a recorded stream, with a ping and its own ids: replayed byte for byte
RECORDED = message_response("Recorded, as it was sent.", rid="msg_rec")
FRAMES = [f.decode() + "\n\n" for f in stream_out.stream_for(RECORDED).split(b"\n\n")[:-1]]
FRAMES.insert(1, 'event: ping\ndata: {"type": "ping"}\n\n')
THINK: Any = {"type": "enabled", "budget_tokens": 1024}
RECORDS = [
    message_record("2+2?", ANSWER, thinking=THINK, max_tokens=2048),
    message_record("Use the tool: 2+2?", TOOL_ANSWER, line=2, tools=TOOLS, max_tokens=100),
    message_record("recorded?", RECORDED, line=3, stream=FRAMES, max_tokens=100),
    message_record("count me", {"input_tokens": 9}, line=4, endpoint=COUNT_TOKENS_PATH),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Counting]]:
    app = Counting(create_app(Settings(), build(RECORDS)))
    with running(app) as url:
        yield url.removesuffix("/v1"), app


@pytest.fixture
def client(server: tuple[str, Counting]) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server[0], api_key="dummy", max_retries=2) as client:
        yield client


def without_nulls(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if v is not None}


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def test_a_message_is_replayed_as_saved(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=2048, messages=ask("2+2?"), thinking=THINK)
    assert raw.headers["request-id"].startswith("req_")
    assert raw.http_response.json() == ANSWER  # the saved body, id and usage included
    message = raw.parse()
    assert message.id == "msg_think" and message.stop_reason == "end_turn"
    assert message.content[0].type == "thinking" and message.content[0].signature == "EqQBsig=="
    assert message.usage.output_tokens == 7 and message.usage.cache_read_input_tokens == 0


def test_the_async_client_and_tool_calls(server: tuple[str, Counting]) -> None:
    async def main() -> Any:
        async with anthropic.AsyncAnthropic(base_url=server[0], api_key="dummy") as client:
            return await client.messages.create(
                model=MODEL, max_tokens=100, messages=ask("Use the tool: 2+2?"),
                tools=TOOLS)
    message = asyncio.run(main())
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use" and message.content[0].input == {"a": 2, "b": 2}


def test_a_stream_made_from_the_saved_message(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model=MODEL, max_tokens=2048, messages=ask("2+2?"),
                                thinking=THINK) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == "The answer is 4." and len(texts) > 1  # small deltas
    assert final.model_dump(exclude_none=True) == without_nulls(ANSWER)


def test_a_recorded_stream_is_replayed_byte_for_byte(server: tuple[str, Counting],
                                                     client: anthropic.Anthropic) -> None:
    body = {"model": MODEL, "max_tokens": 100, "messages": ask("recorded?"), "stream": True}
    got = httpx.post(server[0] + "/v1/messages", json=body)
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.content == "".join(FRAMES).encode()
    with client.messages.stream(model=MODEL, max_tokens=100, messages=ask("recorded?")) as s:
        assert s.get_final_message().model_dump(exclude_none=True) == without_nulls(RECORDED)


def test_count_tokens_and_the_model_list(client: anthropic.Anthropic) -> None:
    assert client.messages.count_tokens(model=MODEL, messages=ask("count me")).input_tokens == 9
    listed = client.models.list()
    assert [m.id for m in listed.data] == [MODEL] and listed.data[0].type == "model"
    openai_shape = httpx.get(str(client.base_url).rstrip("/") + "/v1/models").json()
    assert openai_shape["object"] == "list"  # without anthropic-version: OpenAI's shape


def envelope(response: Any, status: int, kind: str) -> str:
    """Every error the server sends an Anthropic request: its envelope, never retried."""
    assert response.status_code == status, response.text
    assert response.headers["x-should-retry"] == "false"
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == kind
    message: str = body["error"]["message"]
    return message


def test_a_changed_prompt_is_a_400_the_sdk_does_not_retry(
        server: tuple[str, Counting], client: anthropic.Anthropic) -> None:
    before = len(server[1].seen)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=2048, messages=ask("2+3?"),
                               thinking=THINK)
    assert len(server[1].seen) == before + 1  # max_retries=2, and no retry
    message = envelope(e.value.response, 400, "invalid_request_error")
    assert message.startswith("replay_no_match: ") and "2+3" not in message
    assert "message 0 (user)" in message


def test_errors_in_anthropics_envelope(server: tuple[str, Counting],
                                       client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-nope", max_tokens=10, messages=ask("2+2?"))
    assert "claude-nope" in envelope(e.value.response, 404, "not_found_error")
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=MODEL, max_tokens=10, messages=[])
    assert "messages" in envelope(bad.value.response, 400, "invalid_request_error")
    headers = {"anthropic-version": "2023-06-01"}
    envelope(httpx.get(server[0] + "/v1/nowhere", headers=headers), 404, "not_found_error")
    envelope(httpx.get(server[0] + "/v1/messages", headers=headers), 405,
             "invalid_request_error")


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[str]:
    with running(create_app(Settings(api_key="s3cret"), build(RECORDS))) as url:
        yield url.removesuffix("/v1")


@pytest.mark.parametrize("auth", [{"api_key": "s3cret"}, {"auth_token": "s3cret"}])
def test_auth_by_x_api_key_or_bearer(keyed_server: str, auth: dict[str, Any]) -> None:
    with anthropic.Anthropic(base_url=keyed_server, **auth) as client:
        assert client.messages.count_tokens(model=MODEL,
                                            messages=ask("count me")).input_tokens == 9
        assert [m.id for m in client.models.list().data] == [MODEL]


def test_a_wrong_key_is_a_401_in_anthropics_envelope(keyed_server: str) -> None:
    with anthropic.Anthropic(base_url=keyed_server, api_key="wrong") as client:
        with pytest.raises(anthropic.AuthenticationError) as e:
            client.messages.create(model=MODEL, max_tokens=10, messages=ask("2+2?"))
        envelope(e.value.response, 401, "authentication_error")
        with pytest.raises(anthropic.AuthenticationError) as listed:
            client.models.list()
        envelope(listed.value.response, 401, "authentication_error")
