"""Google's Gemini API through the front door: a real uvicorn on a free port, the official
google-genai SDK and plain HTTP: a saved answer streamed in Google's grammar in either
framing, the model list and model by name, an unsaved count, strict mode, and Google's
envelope on the failure paths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors, types
from google.oauth2.credentials import Credentials

from replay_server.paths import GEMINI_COUNT_PATH
from replay_server.settings import Settings
from replay_server.web.app import create_app
from tests.support import (
    Counting,
    build,
    gemini_contents,
    gemini_record,
    gemini_response,
    running,
)

pytestmark = pytest.mark.http
MODEL = "gemini-saved"
LONG = "The answer is 4, since two and two make four, as everyone who counts agrees."
ANSWER = gemini_response(LONG, usage={"promptTokenCount": 8, "candidatesTokenCount": 17,
                                      "totalTokenCount": 25})
RECORDS = [
    gemini_record("What is 2 + 2?", ANSWER, model=MODEL, generationConfig={"temperature": 0}),
    gemini_record("What is 2 + 2?", {"totalTokens": 8}, model=MODEL, line=2,
                  endpoint=GEMINI_COUNT_PATH),
]
ASK = {"contents": gemini_contents("What is 2 + 2?"), "generationConfig": {"temperature": 0}}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Counting]]:
    app = Counting(create_app(Settings(), build(RECORDS)))
    with running(app) as url:
        yield url.removesuffix("/v1"), app


@pytest.fixture
def client(server: tuple[str, Counting]) -> Iterator[genai.Client]:
    with genai.Client(api_key="any", http_options=types.HttpOptions(base_url=server[0])) as c:
        yield c


def test_a_saved_answer_is_streamed_in_googles_grammar(client: genai.Client) -> None:
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="What is 2 + 2?",
                                                        config=types.GenerateContentConfig(
                                                            temperature=0)))
    assert len(chunks) > 3 and "".join(c.text or "" for c in chunks) == LONG
    assert [c.usage_metadata is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata and last.usage_metadata.total_token_count == 25


def test_both_framings_carry_the_same_chunks(server: tuple[str, Counting]) -> None:
    path = f"{server[0]}/v1beta/models/{MODEL}:streamGenerateContent"
    sse = httpx.post(path + "?alt=sse", json=ASK)
    whole = httpx.post(path, json=ASK)
    assert sse.headers["content-type"] == "text/event-stream"
    events = [orjson.loads(e.removeprefix(b"data: ")) for e in sse.content.split(b"\r\n\r\n")
              if e]
    assert whole.json() == events


def test_the_models_by_googles_paths(client: genai.Client, server: tuple[str, Counting]
                                     ) -> None:
    assert [m.name for m in client.models.list()] == [f"models/{MODEL}"]  # GET /v1/models
    assert client.models.get(model=MODEL).display_name == MODEL
    assert httpx.get(f"{server[0]}/v1beta/models").json() == {"models": [{
        "name": f"models/{MODEL}", "displayName": MODEL,
        "supportedGenerationMethods": ["generateContent", "countTokens"]}]}
    assert httpx.get(f"{server[0]}/v1/models?key=k").json()["models"]
    assert httpx.get(f"{server[0]}/v1/models").json()["data"][0]["id"] == MODEL  # OpenAI's
    unknown = httpx.get(f"{server[0]}/v1beta/models/gemini-other")
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    assert httpx.get(f"{server[0]}/v1/models/{MODEL}").status_code == 404  # OpenAI has none


def test_the_models_by_vertex_ais_paths(server: tuple[str, Counting]) -> None:
    """A Vertex AI client asks for its models under `publishers/google/models` (a project's
    too): Google's list and model, as the Developer API's paths answer them."""
    with genai.Client(vertexai=True, project="p", location="us-central1",
                      credentials=Credentials(token="t"),  # type: ignore[no-untyped-call]
                      http_options=types.HttpOptions(base_url=server[0])) as vertex:
        assert vertex.models.get(model=MODEL).display_name == MODEL
        assert [m.display_name for m in vertex.models.list()] == [MODEL]
    project = f"{server[0]}/v1beta1/projects/p/locations/l/publishers/google/models"
    assert httpx.get(f"{project}/{MODEL}").json()["displayName"] == MODEL
    unknown = httpx.get(f"{project}/gemini-other")
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"


def test_an_unsaved_count_is_an_unanswered_tokenizer_call(client: genai.Client,
                                                         server: tuple[str, Counting]) -> None:
    assert client.models.count_tokens(model=MODEL, contents="What is 2 + 2?").total_tokens == 8
    stats = server[1].app.state.replayer.stats  # type: ignore[attr-defined]
    failed = stats.failed()
    with pytest.raises(errors.ClientError) as caught:
        client.models.count_tokens(model=MODEL, contents="What is 3 + 3?")
    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    assert stats.failed() == failed and stats.tokenizer["unanswered"] == 1


@pytest.mark.parametrize(("path", "body", "code", "status"), [
    (f"/v1beta/models/{MODEL}:generateContent", {"contents": []}, 400, "INVALID_ARGUMENT"),
    (f"/v1beta/models/{MODEL}:generateContent", [1], 400, "INVALID_ARGUMENT"),
    (f"/v1beta/models/{MODEL}:streamGenerateContent?alt=proto", ASK, 400, "INVALID_ARGUMENT"),
    (f"/v1beta/models/{MODEL}:embedContent", ASK, 404, "NOT_FOUND"),  # a method not served
    (f"/v1/projects/p/locations/l/publishers/google/models/{MODEL}:predict", ASK, 404,
     "NOT_FOUND"),
    ("/v1beta/models/gemini-other:generateContent", ASK, 404, "NOT_FOUND"),
])
def test_errors_are_googles_envelope_and_never_retried(
        server: tuple[str, Counting], path: str, body: Any, code: int, status: str) -> None:
    stats = server[1].app.state.replayer.stats  # type: ignore[attr-defined]
    failed = stats.failed()
    got = httpx.post(server[0] + path, json=body)
    assert got.status_code == code and got.headers["x-should-retry"] == "false"
    assert stats.failed() == failed + 1  # `run` fails on it
    assert got.json() == {"error": {"code": code, "message": got.json()["error"]["message"],
                                    "status": status}}


def test_strict_mode_names_the_config_field_that_differs() -> None:
    with running(create_app(Settings(strict=True), build(RECORDS))) as url:
        got = httpx.post(f"{url.removesuffix('/v1')}/v1/models/{MODEL}:generateContent",
                         json={"contents": ASK["contents"], "generationConfig": None,
                               "generation_config": {"temperature": 0.5}})
    error = got.json()["error"]
    assert got.status_code == 400 and error["message"].startswith("replay_params_mismatch: ")
    assert "`generationConfig.temperature` differs" in error["message"]
