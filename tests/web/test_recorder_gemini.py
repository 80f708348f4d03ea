"""Recording Google's Gemini API: the google-genai SDK through the recorder in front of the
fake model's Gemini-shaped server (the Developer API's paths and Vertex AI's), then the
same session replayed: the same responses, streams saved with their chunks and replayed
byte for byte in their framing (re-framed in the other), countTokens, candidate_count,
a chat of several turns with thinking on (its signatures sent back re-encoded), function
calls, JSON mode, and no key written down."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors, types
from google.oauth2.credentials import Credentials
from pydantic import BaseModel

from replay_server.commands.serve import open_run
from replay_server.paths import GEMINI_COUNT_PATH, GEMINI_PATH
from replay_server.saved.writer import RecordWriter
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.web.recorder import Recorder, create_record_app
from tests.fakemodel.server import create_app as fake_model
from tests.support import Counting, running, serving

pytestmark = pytest.mark.http
MODEL = "gemini-fake"
GREEDY = types.GenerateContentConfig(temperature=0)
THINKING = types.GenerateContentConfig(
    thinking_config=types.ThinkingConfig(include_thoughts=True), temperature=0)
TOOLS = types.GenerateContentConfig(temperature=0, tools=[types.Tool(function_declarations=[
    types.FunctionDeclaration(name="calculator", description="Evaluate an expression.",
                              parameters_json_schema={
                                  "type": "object",
                                  "properties": {"expression": {"type": "string"}}})])])
KEY = "AIza-secret-not-saved"


class Answer(BaseModel):
    answer: int
    explanation: str


def dumped(response: Any) -> Any:
    """What the SDK made of a response, but the HTTP headers it came with."""
    return response.model_dump(mode="json", exclude={"sdk_http_response"})


def developer(root: str) -> genai.Client:
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=root))


def vertex(root: str) -> genai.Client:
    return genai.Client(vertexai=True, project="p", location="us-central1",
                        credentials=Credentials(token="ya29-token"),  # type: ignore[no-untyped-call]
                        http_options=types.HttpOptions(base_url=root))


async def in_async(client: genai.Client) -> list[Any]:
    async with client.aio as aio:
        whole = await aio.models.generate_content(model=MODEL, contents="What is 9 * 8?",
                                                  config=GREEDY)
        pieces = [dumped(c) async for c in await aio.models.generate_content_stream(
            model=MODEL, contents="What is 9 * 8?", config=GREEDY)]
    return [dumped(whole), pieces]


def session(root: str) -> dict[str, Any]:
    """A harness-like session of the SDK against the server at `root`."""
    out: dict[str, Any] = {}
    with developer(root) as client:
        models = client.models
        out["plain"] = dumped(models.generate_content(model=MODEL, contents="What is 12 + 7?",
                                                      config=GREEDY))
        out["stream"] = [dumped(c) for c in models.generate_content_stream(
            model=MODEL, contents="What is 3 + 7?", config=GREEDY)]
        out["count"] = dumped(models.count_tokens(model=MODEL, contents="What is 12 + 7?"))
        out["two"] = dumped(models.generate_content(
            model=MODEL, contents="What is 5 + 7?",
            config=types.GenerateContentConfig(candidate_count=2, temperature=0)))
        chat = client.chats.create(model=MODEL, config=THINKING)
        out["chat"] = [dumped(chat.send_message("What is 3 + 4?")),
                       dumped(chat.send_message("And what is 5 * 6?")),
                       [dumped(c) for c in chat.send_message_stream("And what is 8 - 2?")],
                       dumped(chat.send_message("And what is 1 + 1?"))]
        ask = types.Content(role="user", parts=[
            types.Part(text="Please use the calculator: what is 40 + 2?")])
        called = models.generate_content(model=MODEL, contents=[ask], config=TOOLS)
        assert called.candidates and called.candidates[0].content
        result = types.Content(role="user", parts=[types.Part.from_function_response(
            name="calculator", response={"result": "42"})])
        out["tools"] = [dumped(called), dumped(models.generate_content(
            model=MODEL, contents=[ask, called.candidates[0].content, result], config=TOOLS))]
        out["json"] = models.generate_content(
            model=MODEL, contents="What is 2 + 2?", config=types.GenerateContentConfig(
                response_mime_type="application/json", response_schema=Answer,
                temperature=0)).parsed
        out["async"] = asyncio.run(in_async(client))
    with vertex(root) as client:
        out["vertex"] = [dumped(client.models.generate_content(model=MODEL,
                                                               contents="What is 6 + 6?")),
                         dumped(client.models.count_tokens(model=MODEL,
                                                           contents="What is 6 + 6?"))]
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The session recorded in front of the fake: the saved file and what the SDK got."""
    saved = tmp_path_factory.mktemp("gemini") / "gemini.jsonl"
    with running(fake_model([MODEL])) as upstream:
        recorder = Recorder(upstream.removesuffix("/v1"), RecordWriter(saved))
        with running(create_record_app(recorder)) as url:
            original = session(url.removesuffix("/v1"))
        recorder.writer.close()
    assert recorder.counts["recorded"] == 15, recorder.summary()
    yield saved, original


def test_a_recorded_session_is_replayed_identically(recorded: tuple[Path, dict[str, Any]]
                                                    ) -> None:
    saved, original = recorded
    lines = [orjson.loads(line) for line in saved.read_bytes().splitlines()]
    assert {r["endpoint"] for r in lines} == {GEMINI_PATH, GEMINI_COUNT_PATH}
    assert {r["model"] for r in lines} == {MODEL}
    assert all("model" not in r["request"] for r in lines)  # the body, as the SDK sent it
    assert sum("stream" in r for r in lines) == 3
    assert KEY.encode() not in saved.read_bytes() and b"ya29" not in saved.read_bytes()
    assert original["chat"][0]["candidates"][0]["content"]["parts"][0]["thought"]
    assert original["two"]["candidates"][1]["index"] == 1
    assert isinstance(original["json"], Answer)
    with serving([saved]) as url:
        assert session(url.removesuffix("/v1")) == original


def test_a_recorded_stream_is_sent_as_it_was_or_re_framed(
        recorded: tuple[Path, dict[str, Any]]) -> None:
    saved, _ = recorded
    (streamed, *_) = [r for r in (orjson.loads(line) for line in saved.read_bytes().splitlines())
                      if "stream" in r]
    frames = "".join(streamed["stream"]).encode()
    path = f"/v1beta/models/{MODEL}:streamGenerateContent"
    with serving([saved]) as url:
        root = url.removesuffix("/v1")
        sse = httpx.post(f"{root}{path}?alt=sse", json=streamed["request"])
        whole = httpx.post(f"{root}{path}", json=streamed["request"])
    assert sse.content == frames  # byte for byte, as the upstream sent it
    assert sse.headers["content-type"] == "text/event-stream"
    assert whole.headers["content-type"] == "application/json"
    assert whole.json() == [orjson.loads(f.removeprefix("data: "))
                            for f in streamed["stream"]]


def test_a_changed_prompt_is_a_400_the_sdk_does_not_retry(
        recorded: tuple[Path, dict[str, Any]]) -> None:
    """A miss says where the nearest saved prompt differs (never quoting it) in Google's
    envelope, `replay_no_match` first; an unknown model is Google's 404; the SDK retries
    neither, even with retries on; both are counted."""
    saved, _ = recorded
    settings = Settings()
    app = create_app(settings, open_run([saved], settings).index)
    counting = Counting(app)
    retries = types.HttpRetryOptions(attempts=3)
    with running(counting) as url, genai.Client(api_key="k", http_options=types.HttpOptions(
            base_url=url.removesuffix("/v1"), retry_options=retries)) as client:
        with pytest.raises(errors.ClientError) as missed:
            client.models.generate_content(model=MODEL, contents="What is 12 + 8?",
                                           config=GREEDY)
        with pytest.raises(errors.ClientError) as unknown:
            client.models.generate_content(model="gemini-other", contents="What is 12 + 7?")
    assert (missed.value.code, missed.value.status) == (400, "INVALID_ARGUMENT")
    assert missed.value.message and missed.value.message.startswith("replay_no_match: ")
    assert "content 0 (user), character 13: the text differs" in missed.value.message
    assert "12 + 8" not in missed.value.message  # never the prompt's text
    assert (unknown.value.code, unknown.value.status) == (404, "NOT_FOUND")
    assert len(counting.seen) == 2  # neither was retried
    stats = app.state.replayer.stats
    assert stats.failed() == 2
