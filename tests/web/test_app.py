"""Through the front door: a real uvicorn on a free port, the official openai client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.wire import keys
from tests.parts import redis_server
from tests.support import (
    MODEL,
    Counting,
    assert_error,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    running,
    user,
)

pytestmark = pytest.mark.http

CALL: dict[str, Any] = {"id": "call_1", "type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}
RECORDS = [
    chat_record("2+2?", chat_response("4", reasoning="2 plus 2 is 4", finish="stop",
                                      rid="chatcmpl-r")),
    chat_record("colors?", chat_response("red", "blue", rid="chatcmpl-n2"), line=2),
    chat_record("same?", chat_response("x"), instance=1, line=3),
    chat_record("same?", chat_response("y"), instance=2, line=4),
    chat_record("broken?", None, unusable="the saved text is null", line=5),
    chat_record("tool?", chat_response(None, tool_calls=[CALL], finish="tool_calls"), line=6,
                tools=[{"type": "function", "function": {"name": "add"}}]),
    completion_record("The capital of France is", completion_response(" Paris."), line=7),
    completion_record("1 + 1 =", completion_response(" 2", " two"), line=8),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Counting]]:
    app = Counting(create_app(Settings(max_body_size=100_000), build(RECORDS)))
    with running(app) as url:
        yield url, app


@pytest.fixture
def client(server: tuple[str, Counting]) -> Iterator[openai.OpenAI]:
    httpx.post(server[0].removesuffix("/v1") + "/replay/reset")
    with openai.OpenAI(base_url=server[0], api_key="dummy") as client:
        yield client


def test_chat_replays_text_reasoning_finish_reason_and_usage(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=user("2+2?"))
    saved = RECORDS[0].response
    assert saved is not None
    assert r.id == "chatcmpl-r"
    assert r.choices[0].message.content == "4"
    assert r.choices[0].message.model_extra == {"reasoning": "2 plus 2 is 4"}
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.model_dump(exclude_none=True) == saved["usage"]


def test_the_source_record_is_named_in_a_header(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model=MODEL,
                                                           messages=user("2+2?"))
    assert raw.headers["x-replay-source"] == "saved.jsonl:1"


def test_chat_stream_reassembles_to_the_saved_answer(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=user("2+2?"),
                                            stream=True, stream_options={"include_usage": True})
    content, reasoning, finish, usage = "", "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning", "")
            finish = choice.finish_reason or finish
    assert (content, reasoning, finish) == ("4", "2 plus 2 is 4", "stop")
    assert usage == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}


def test_n2_and_n1_calls(client: openai.OpenAI) -> None:
    both = client.chat.completions.create(model=MODEL, messages=user("colors?"), n=2)
    assert [c.message.content for c in both.choices] == ["red", "blue"]
    one = [client.chat.completions.create(model=MODEL, messages=user("colors?"))
           .choices[0].message.content for _ in range(2)]
    assert one == ["red", "blue"]


def test_streamed_n2_streams_each_index(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=user("colors?"),
                                            n=2, stream=True)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {0: "red", 1: "blue"}


def test_tool_calls_replay(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=user("tool?"), tools=[
        {"type": "function", "function": {"name": "add"}}])
    calls = r.choices[0].message.tool_calls
    assert calls is not None and isinstance(calls[0], ChatCompletionMessageFunctionToolCall)
    assert calls[0].function.arguments == CALL["function"]["arguments"]
    assert r.choices[0].finish_reason == "tool_calls"


def test_completions_batch_and_stream(client: openai.OpenAI) -> None:
    batch = client.completions.create(model=MODEL,
                                      prompt=["The capital of France is", "1 + 1 ="])
    assert [(c.index, c.text) for c in batch.choices] == [(0, " Paris."), (1, " 2")]
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The capital of France is", stream=True) if c.choices)
    assert text == " Paris."


async def test_async_client_under_concurrency(server: tuple[str, Counting]) -> None:
    async def one(client: openai.AsyncOpenAI, i: int) -> str | None:
        if i % 2:
            r = await client.completions.create(model=MODEL, prompt="The capital of France is")
            return r.choices[0].text
        c = await client.chat.completions.create(model=MODEL, messages=user("2+2?"))
        return c.choices[0].message.content

    async with openai.AsyncOpenAI(base_url=server[0], api_key="dummy") as client:
        answers = await asyncio.gather(*(one(client, i) for i in range(64)))
    assert answers == ["4", " Paris."] * 32


@pytest.mark.parametrize("text, n, code", [
    ("never saved", 1, "replay_no_match"),
    ("same?", 1, "replay_ambiguous"),
    ("colors?", 3, "replay_n_mismatch"),
    ("broken?", 1, "replay_unusable"),
])
def test_replay_errors_are_400_and_sent_once(client: openai.OpenAI,
                                             server: tuple[str, Counting],
                                             text: str, n: int, code: str) -> None:
    before = len(server[1].seen)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=user(text), n=n)
    assert e.value.code == code
    assert len(server[1].seen) == before + 1


def test_exhausted_after_the_saved_samples(client: openai.OpenAI) -> None:
    for _ in range(2):
        client.chat.completions.create(model=MODEL, messages=user("colors?"))
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=user("colors?"))
    assert e.value.code == "replay_exhausted"


def test_a_miss_says_where_the_nearest_prompt_differs(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=user("2+2? "))
    assert "saved.jsonl:1" in e.value.message
    assert "message 0 (user), character 4" in e.value.message


def test_a_miss_on_a_stream_fails_before_any_stream_starts(server: tuple[str, Counting]) -> None:
    r = httpx.post(server[0] + "/chat/completions",
                   json={"model": MODEL, "messages": user("nope"), "stream": True})
    assert_error(r, 400, "replay_no_match", "messages")


def test_unknown_model_is_404_and_not_retried(client: openai.OpenAI,
                                              server: tuple[str, Counting]) -> None:
    before = len(server[1].seen)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=user("2+2?"))
    assert "The model `gpt-4o` does not exist" in e.value.message and MODEL in e.value.message
    assert len(server[1].seen) == before + 1


@pytest.mark.parametrize("body, param", [
    (b"{not json", None),
    (b"", None),
    (b"[]", None),
    (b'{"model": "test/model"}', "messages"),
    (b'{"messages": "hi"}', "messages"),
    (b'{"messages": [{"content": "hi"}]}', "messages[0]"),
    (b'{"messages": [{"role": "user", "content": "q"}], "n": 0}', "n"),
    (b'{"messages": [{"role": "user", "content": "q"}], "n": "2"}', "n"),
    (b'{"messages": [{"role": "user", "content": "q"}], "temperature": "hot"}', "temperature"),
    (b'{"messages": [{"role": "user", "content": "q"}], "stream_options": {}}', "stream_options"),
])
def test_malformed_chat_requests_are_400_naming_the_field(server: tuple[str, Counting],
                                                          body: bytes, param: str | None) -> None:
    r = httpx.post(server[0] + "/chat/completions", content=body,
                   headers={"content-type": "application/json"})
    assert_error(r, 400, 400, param)


@pytest.mark.parametrize("body, param", [
    (b'{"model": "test/model"}', "prompt"),
    (b'{"prompt": []}', "prompt"),
    (b'{"prompt": [1, "a"]}', "prompt"),
    (b'{"prompt": "a", "logprobs": true}', "logprobs"),
])
def test_malformed_completion_requests_are_400(server: tuple[str, Counting], body: bytes,
                                               param: str) -> None:
    r = httpx.post(server[0] + "/completions", content=body)
    assert_error(r, 400, 400, param)


def test_unknown_fields_are_ignored(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=user("2+2?"),
                                       extra_body={"top_k": 5, "chat_template_kwargs": {}})
    assert r.choices[0].message.content == "4"


def test_oversized_bodies_are_413(server: tuple[str, Counting]) -> None:
    big = {"model": MODEL, "messages": user("x" * 200_000)}
    assert_error(httpx.post(server[0] + "/chat/completions", json=big), 413)


def test_unknown_routes_and_methods_use_the_envelope(server: tuple[str, Counting]) -> None:
    assert_error(httpx.get(server[0] + "/nope"), 404, 404)
    assert_error(httpx.get(server[0] + "/chat/completions"), 405, 405)


# (method, path, status, whether `run` counts it as a request that got no generation)
PROBES = [
    ("GET", "/v1/", 404, False),  # garak's check that its default base URL is up
    ("GET", "/v1", 404, False),
    ("HEAD", "/v1/", 404, False),
    ("GET", "/", 404, False),
    ("GET", "/v1/models/" + MODEL, 404, False),  # openai's models.retrieve: vLLM has none
    ("GET", "/v1/nope", 404, False),
    ("POST", "/v1/chat/completion", 404, True),  # a misspelled generation endpoint
    ("POST", "/v1/", 404, True),
    ("PUT", "/v1/nope", 404, True),  # (anything that sends something may ask for one)
    ("GET", "/v1/chat/completions", 405, True),  # a generation endpoint, asked wrong
    ("GET", "/v1/chat/completions/chatcmpl-r", 404, True),  # a stored completion by id
    ("GET", "/v1/responses/resp_nope", 404, True),  # a saved response by id: none has it
]


@pytest.mark.parametrize(("method", "path", "status", "counted"), PROBES,
                         ids=[f"{m} {p}" for m, p, _, _ in PROBES])
def test_only_a_request_that_can_cost_a_generation_is_counted_a_miss(
        method: str, path: str, status: int, counted: bool) -> None:
    """A probe of the base URL or of any route but a generation endpoint is answered as a
    real server answers it (an unknown route: 404) and is no miss; a request on a
    generation endpoint, or one that sends something anywhere, is."""
    app = create_app(Settings(), build(RECORDS))
    stats = app.state.replayer.stats
    with running(app) as url:
        response = httpx.request(method, url.removesuffix("/v1") + path)
    assert response.status_code == status
    if method != "HEAD":
        assert_error(response, status)
    assert stats.failed() == int(counted) and stats.requests == int(counted)
    assert stats.in_flight() == 0


def test_models_health_and_status(server: tuple[str, Counting], client: openai.OpenAI
                                  ) -> None:
    base = server[0].removesuffix("/v1")
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(base + "/health").status_code == 200
    client.chat.completions.create(model=MODEL, messages=user("2+2?"))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=user("nope"))
    status = httpx.get(base + "/replay/status").json()
    model = status["models"][MODEL]
    assert model["records"] == len(RECORDS) and model["prompts"] == 7
    assert model["hits"] == 1 and model["replay_no_match"] == 1
    assert status["key_version"] == keys.KEY_VERSION


@pytest.mark.http
@pytest.mark.slow
def test_a_wrong_key_while_the_shared_state_is_down_is_a_503_not_a_crash(
        tmp_path: Path) -> None:
    """The refusal of a request without the API key is counted in the shared state; when
    the store cannot be reached it is kept, and the client gets the store's 503 in the
    envelope (never a bare 500)."""
    with redis_server.running(tmp_path) as store:
        app = create_app(Settings(state=store.url, api_key="k"), build([]))
        with running(app) as url:
            store.stop()
            response = httpx.post(url.removesuffix("/v1") + "/replay/reset")
            assert_error(response, 503, "replay_state_unavailable")
