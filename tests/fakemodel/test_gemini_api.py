"""The fake model's Gemini API (gemini_api.py, gemini_bodies.py), through the front door: its
wire shapes over HTTP, then the real clients issue 31 records with: the google-genai SDK,
inspect_ai's `google/` provider and LiteLLM's `gemini/` models, each pointed at the fake
the way a user points it at another server (README.md says how)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types
from google.oauth2.credentials import Credentials
from pydantic import BaseModel

from tests.fakemodel.server import create_app
from tests.harnesses.commands import BIN, offline_env
from tests.support import ROOT, running

pytestmark = pytest.mark.http
MODEL = "gemini-fake"
ASK = {"contents": [{"role": "user", "parts": [{"text": "What is 12 + 7?"}]}],
       "generationConfig": {"temperature": 0}}
KEY = {"x-goog-api-key": "any-key"}


class Fake:
    """The fake on a real uvicorn, and the wire log it appends to."""

    def __init__(self, root: str, log: Path) -> None:
        self.root, self.log = root, log

    def mark(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def since(self, mark: int) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines()[mark:]
        return [json.loads(line) for line in lines]

    def post(self, path: str, body: Any, **kw: Any) -> httpx.Response:
        return httpx.post(self.root + path, json=body, timeout=30, **kw)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fake]:
    log = tmp_path_factory.mktemp("gemini") / "wire.jsonl"
    with running(create_app([MODEL], str(log))) as url:
        yield Fake(url.removesuffix("/v1"), log)


def text_of(response: dict[str, Any], index: int = 0) -> str:
    parts = response["candidates"][index]["content"].get("parts", [])
    return "".join(p.get("text", "") for p in parts if not p.get("thought"))


# --------------------------------------------------------------------------- the wire


def test_an_answer_has_googles_shape(fake: Fake) -> None:
    got = fake.post(f"/v1beta/models/{MODEL}:generateContent", ASK, headers=KEY).json()
    candidate = got["candidates"][0]
    assert candidate["content"]["role"] == "model" and candidate["finishReason"] == "STOP"
    assert candidate["index"] == 0 and candidate["safetyRatings"]
    assert text_of(got).startswith("The answer is ")
    usage = got["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert got["modelVersion"] == MODEL and got["responseId"]


@pytest.mark.parametrize("version", ["v1", "v1beta", "v1alpha"])
def test_every_version_and_vertex_form_gives_the_same_answer(fake: Fake, version: str) -> None:
    plain = fake.post(f"/{version}/models/{MODEL}:generateContent", ASK, headers=KEY).json()
    vertex = fake.post(f"/v1beta1/projects/p/locations/us-central1/publishers/google/models/"
                       f"{MODEL}:generateContent", ASK, headers={"authorization": "Bearer t"})
    assert text_of(vertex.json()) == text_of(plain) and "createTime" in vertex.json()


def test_snake_case_fields_read_as_camel_case(fake: Fake) -> None:
    camel = {**ASK, "systemInstruction": {"parts": [{"text": "Be brief."}]},
             "generationConfig": {"temperature": 0, "maxOutputTokens": 3}}
    snake = {"contents": ASK["contents"], "system_instruction": {"parts": [{"text": "Be brief."}]},
             "generation_config": {"temperature": 0, "max_output_tokens": 3}}
    answers = [fake.post(f"/v1beta/models/{MODEL}:generateContent", b, headers=KEY).json()
               for b in (camel, snake)]
    assert answers[0]["candidates"] == answers[1]["candidates"]
    assert answers[0]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert answers[0]["usageMetadata"]["candidatesTokenCount"] == 3


def test_a_stream_without_alt_sse_is_one_json_array(fake: Fake) -> None:
    whole = fake.post(f"/v1beta/models/{MODEL}:generateContent", ASK, headers=KEY).json()
    got = fake.post(f"/v1beta/models/{MODEL}:streamGenerateContent?key=k", ASK)
    assert got.headers["content-type"].startswith("application/json")
    pieces = got.json()
    assert len(pieces) > 1 and "".join(text_of(p) for p in pieces) == text_of(whole)
    assert [("usageMetadata" in p, "finishReason" in p["candidates"][0]) for p in pieces] == \
        [(False, False)] * (len(pieces) - 1) + [(True, True)]


def test_a_stream_with_alt_sse_is_data_events_without_done(fake: Fake) -> None:
    got = fake.post(f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", ASK, headers=KEY)
    assert got.headers["content-type"].startswith("text/event-stream")
    events = got.text.split("\r\n\r\n")
    assert events[-1] == "" and all(e.startswith("data: {") for e in events[:-1])
    assert json.loads(events[-2].removeprefix("data: "))["usageMetadata"]


def test_count_tokens_counts_the_prompt_generate_content_does(fake: Fake) -> None:
    usage = fake.post(f"/v1beta/models/{MODEL}:generateContent", ASK, headers=KEY).json()
    counted = [fake.post(f"/v1beta/models/{MODEL}:countTokens", body, headers=KEY).json()
               for body in ({"contents": ASK["contents"]},
                            {"generateContentRequest": {"model": f"models/{MODEL}", **ASK}})]
    assert [c["totalTokens"] for c in counted] == \
        [usage["usageMetadata"]["promptTokenCount"]] * 2


@pytest.mark.parametrize(("path", "body", "headers", "code", "status"), [
    (f"/v1beta/models/{MODEL}:generateContent", ASK, {}, 403, "PERMISSION_DENIED"),
    (f"/v1/publishers/google/models/{MODEL}:generateContent", ASK, {}, 401, "UNAUTHENTICATED"),
    (f"/v1beta/models/{MODEL}:generateContent", {"contents": []}, KEY, 400, "INVALID_ARGUMENT"),
    (f"/v1beta/models/{MODEL}:generateContent", [1], KEY, 400, "INVALID_ARGUMENT"),
    ("/v1beta/models/no-such-model:generateContent", ASK, KEY, 404, "NOT_FOUND"),
    (f"/v1beta/models/{MODEL}:embedContent", ASK, KEY, 404, "NOT_FOUND"),
    (f"/v1beta/models/{MODEL}:generateContent", {"contents": [{"role": "user", "parts": [
        {"text": "[fault: 429] What is 1 + 1?"}]}]}, KEY, 429, "RESOURCE_EXHAUSTED"),
    (f"/v1beta/models/{MODEL}:generateContent", {"contents": [
        {"role": "model", "parts": [{"text": "4", "thoughtSignature": "bm90IG91cnM="}]},
        {"role": "user", "parts": [{"text": "What is 1 + 1?"}]}]}, KEY, 400, "INVALID_ARGUMENT"),
])
def test_errors_are_googles_envelope(fake: Fake, path: str, body: Any, headers: dict[str, str],
                                     code: int, status: str) -> None:
    got = fake.post(path, body, headers=headers)
    error = got.json()["error"]
    assert (got.status_code, error["code"], error["status"]) == (code, code, status)
    assert error["message"]


def test_get_v1_models_is_googles_list_when_google_asks(fake: Fake) -> None:
    openai = httpx.get(fake.root + "/v1/models").json()
    google = httpx.get(fake.root + "/v1/models", headers=KEY).json()
    assert openai["data"][0]["id"] == MODEL
    assert google["models"][0]["name"] == f"models/{MODEL}"
    paged = httpx.get(fake.root + "/v1beta/models?key=k&pageSize=1&pageToken=1").json()
    assert paged == {"models": []}
    bad = httpx.get(fake.root + "/v1beta/models?key=k&pageToken=x")
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"


# --------------------------------------------------------------------------- google-genai

THINKING = types.GenerateContentConfig(
    thinking_config=types.ThinkingConfig(include_thoughts=True), temperature=0)
GREEDY = types.GenerateContentConfig(temperature=0)


@pytest.fixture
def client(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> Iterator[genai.Client]:
    """The SDK as a user points it at another server: GOOGLE_GEMINI_BASE_URL and a key in
    GEMINI_API_KEY (GOOGLE_API_KEY would win over it; GOOGLE_GENAI_USE_VERTEXAI would move
    it to Vertex AI's paths)."""
    for name in ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.root)
    monkeypatch.setenv("GEMINI_API_KEY", "any-key")
    with genai.Client() as sdk:
        yield sdk


def signatures(contents: list[dict[str, Any]]) -> list[bytes]:
    """The thought signatures in `contents`, decoded (the SDK re-encodes what it got)."""
    return [base64.urlsafe_b64decode(p["thoughtSignature"].replace("+", "-").replace("/", "_"))
            for c in contents for p in c["parts"] if "thoughtSignature" in p]


def parts_of(response: types.GenerateContentResponse, index: int = 0) -> list[types.Part]:
    content = (response.candidates or [])[index].content
    return (content.parts if content else None) or []


@pytest.mark.harness
def test_sdk_plain_and_streamed_answers_agree(fake: Fake, client: genai.Client) -> None:
    whole = client.models.generate_content(model=MODEL, contents="What is 12 + 7?",
                                           config=GREEDY)
    streamed = list(client.models.generate_content_stream(
        model=MODEL, contents="What is 12 + 7?", config=GREEDY))
    assert whole.text and "".join(c.text or "" for c in streamed) == whole.text
    assert len(streamed) > 1 and streamed[-1].usage_metadata == whole.usage_metadata
    assert whole.candidates and whole.candidates[0].finish_reason == types.FinishReason.STOP
    counted = client.models.count_tokens(model=MODEL, contents="What is 12 + 7?")
    assert whole.usage_metadata and counted.total_tokens == whole.usage_metadata.prompt_token_count
    assert [m.name for m in client.models.list()] == [f"models/{MODEL}"]
    assert client.models.get(model=MODEL).output_token_limit


@pytest.mark.harness
async def test_sdk_async_answers_as_sync_does(fake: Fake, client: genai.Client) -> None:
    sync = client.models.generate_content(model=MODEL, contents="What is 9 * 8?", config=GREEDY)
    async with client.aio as aio:
        whole = await aio.models.generate_content(model=MODEL, contents="What is 9 * 8?",
                                                  config=GREEDY)
        pieces = [c.text async for c in await aio.models.generate_content_stream(
            model=MODEL, contents="What is 9 * 8?", config=GREEDY)]
    assert whole.text == "".join(p or "" for p in pieces) == sync.text


@pytest.mark.harness
def test_sdk_chat_with_thinking_sends_the_signatures_back(fake: Fake,
                                                          client: genai.Client) -> None:
    mark = fake.mark()
    chat = client.chats.create(model=MODEL, config=THINKING)
    first = chat.send_message("What is 3 + 4?")
    chat.send_message("And what is 5 * 6?")
    streamed = list(chat.send_message_stream("And what is 8 - 2?"))
    assert first.usage_metadata
    parts = parts_of(first)
    assert [bool(p.thought) for p in parts] == [True, False] and parts[1].thought_signature
    assert first.usage_metadata.thoughts_token_count
    assert any(p.thought for chunk in streamed for p in parts_of(chunk))
    wire = fake.since(mark)
    given = [signatures([c["content"] for c in w["response"]["candidates"]]) for w in wire]
    assert signatures(wire[1]["request"]["contents"]) == given[0]
    assert signatures(wire[2]["request"]["contents"]) == given[0] + given[1]


@pytest.mark.harness
def test_sdk_gets_candidate_count_candidates(client: genai.Client) -> None:
    got = client.models.generate_content(model=MODEL, contents="What is 12 + 7?", config=(
        types.GenerateContentConfig(candidate_count=2, temperature=0)))
    assert [c.index for c in got.candidates or []] == [0, 1]
    assert parts_of(got, 0)[0].text != parts_of(got, 1)[0].text


@pytest.mark.harness
def test_sdk_function_call_round_trip(client: genai.Client) -> None:
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="calculator", description="Evaluate an arithmetic expression.",
        parameters_json_schema={"type": "object",
                                "properties": {"expression": {"type": "string"}}})])
    config = types.GenerateContentConfig(tools=[tool], temperature=0)
    ask = types.Content(role="user", parts=[
        types.Part(text="Please use the calculator: what is 40 + 2?")])
    called = client.models.generate_content(model=MODEL, contents=[ask], config=config)
    assert called.function_calls and called.candidates and called.candidates[0].content
    call = called.function_calls[0]
    assert (call.name, call.args) == ("calculator", {"expression": "40 + 2"})
    result = types.Content(role="user", parts=[types.Part.from_function_response(
        name="calculator", response={"result": "42"})])
    answered = client.models.generate_content(
        model=MODEL, contents=[ask, called.candidates[0].content, result], config=config)
    assert answered.text == "The answer is 42."


class Answer(BaseModel):
    answer: int
    explanation: str


@pytest.mark.harness
def test_sdk_json_mode_answers_the_schema(client: genai.Client) -> None:
    got = client.models.generate_content(model=MODEL, contents="What is 2 + 2?", config=(
        types.GenerateContentConfig(response_mime_type="application/json",
                                    response_schema=Answer, temperature=0)))
    assert isinstance(got.parsed, Answer) and str(got.parsed.answer) in got.parsed.explanation


@pytest.mark.harness
@pytest.mark.parametrize(("model", "contents", "code", "status"), [
    ("no-such-model", "What is 1 + 1?", 404, "NOT_FOUND"),
    (MODEL, "[fault: 429] What is 1 + 1?", 429, "RESOURCE_EXHAUSTED"),
    (MODEL, [types.Content(role="model", parts=[types.Part(text="2", thought_signature=b"?")]),
             types.Content(role="user", parts=[types.Part(text="What is 1 + 1?")])],
     400, "INVALID_ARGUMENT"),
])
def test_sdk_raises_client_error_with_the_status(client: genai.Client, model: str,
                                                 contents: Any, code: int, status: str) -> None:
    with pytest.raises(errors.ClientError) as raised:
        client.models.generate_content(model=model, contents=contents)
    assert (raised.value.code, raised.value.status) == (code, status)


@pytest.mark.harness
def test_sdk_on_vertex_ai_paths(fake: Fake) -> None:
    """Vertex AI with a project: `/v1beta1/projects/P/locations/L/publishers/google/models/
    M:method`, a Bearer token (GOOGLE_VERTEX_BASE_URL would name the base URL too)."""
    mark = fake.mark()
    with genai.Client(vertexai=True, project="p", location="us-central1",
                      credentials=Credentials(  # type: ignore[no-untyped-call]
                          token="any-token"),  # (google-auth's constructor is untyped)
                      http_options=types.HttpOptions(base_url=fake.root)) as vertex:
        got = vertex.models.generate_content(model=MODEL, contents="What is 12 + 7?")
        counted = vertex.models.count_tokens(model=MODEL, contents="What is 12 + 7?")
        listed = [m.name for m in vertex.models.list()]
    assert got.text and got.create_time and got.usage_metadata
    assert counted.total_tokens == got.usage_metadata.prompt_token_count
    assert listed == [f"publishers/google/models/{MODEL}"]
    assert [w["path"] for w in fake.since(mark)] == [
        f"/v1beta1/projects/p/locations/us-central1/publishers/google/models/{MODEL}:{method}"
        for method in ("generateContent", "countTokens")]


# --------------------------------------------------------------------------- the harnesses


def harness_env(home: Path, **variables: str) -> dict[str, str]:
    """An offline harness environment with none of Google's variables but `variables`."""
    env = {k: v for k, v in offline_env(home).items()
           if not k.startswith(("GOOGLE_", "GEMINI_", "VERTEX"))}
    return {**env, **variables}


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.parametrize(("variable", "streaming"), [("GOOGLE_BASE_URL", "false"),
                                                     ("GOOGLE_GEMINI_BASE_URL", "true")])
def test_inspect_google_provider(fake: Fake, tmp_path: Path, variable: str,
                                 streaming: str) -> None:
    """inspect_ai's `google/` model reads its own GOOGLE_BASE_URL, or leaves the base URL to
    the SDK (GOOGLE_GEMINI_BASE_URL); it thinks for a gemini-2.5 name, and sends the
    thought signature of its calculator call back with the call."""
    from inspect_ai.log import read_eval_log

    shutil.copytree(ROOT / "tests" / "data" / "gen" / "tasks", tmp_path / "tasks")
    mark = fake.mark()
    ran = subprocess.run(
        [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model", "google/gemini-2.5-flash",
         "-M", f"streaming={streaming}", "--temperature", "0", "--display", "plain",
         "--log-dir", str(tmp_path / "logs")],
        env=harness_env(tmp_path, **{variable: fake.root, "GOOGLE_API_KEY": "any-key"}),
        cwd=tmp_path / "tasks", capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (log,) = (read_eval_log(str(p)) for p in (tmp_path / "logs").glob("*.eval"))
    assert log.status == "success" and len(log.samples) == 6
    wire = fake.since(mark)
    method = "streamGenerateContent" if streaming == "true" else "generateContent"
    assert {w["path"] for w in wire} == {f"/v1/models/gemini-2.5-flash:{method}"}
    assert all("chunks" in w for w in wire) == (streaming == "true")
    given = {s for w in wire for s in signatures([c["content"]
                                                 for c in w["response"]["candidates"]])}
    assert any(set(signatures(w["request"]["contents"])) & given for w in wire)


LITELLM = """
import json, litellm
model, ask = "gemini/gemini-2.5-flash", [{"role": "user", "content": "What is 12 + 7?"}]
tools = [{"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}}}}]
out = {"plain": litellm.completion(model=model, messages=ask, temperature=0)
       .choices[0].message.content}
out["streamed"] = "".join(c.choices[0].delta.content or "" for c in litellm.completion(
    model=model, messages=ask, temperature=0, stream=True))
two = litellm.completion(model=model, messages=ask, n=2, reasoning_effort="low")
out["reasoning"] = [c.message.reasoning_content for c in two.choices]
chat = [{"role": "user", "content": "Please use the calculator: what is 6 * 7?"}]
called = litellm.completion(model=model, messages=chat, tools=tools, reasoning_effort="low")
call = called.choices[0].message.tool_calls[0]
chat += [called.choices[0].message.model_dump(),
         {"role": "tool", "tool_call_id": call.id, "content": "42"}]
out["tool"] = litellm.completion(model=model, messages=chat, tools=tools,
                                 reasoning_effort="low").choices[0].message.content
try:
    litellm.completion(model="gemini/no-such-model", messages=ask)
except litellm.NotFoundError as e:
    out["missing"] = e.status_code
print(json.dumps(out))
"""


@pytest.mark.harness
@pytest.mark.slow
def test_litellm_gemini_models(fake: Fake, tmp_path: Path) -> None:
    """LiteLLM's `gemini/` models read GEMINI_API_BASE (the versioned root: it appends
    `models/M:method`) and GEMINI_API_KEY (GOOGLE_API_KEY wins over it)."""
    mark = fake.mark()
    ran = subprocess.run([sys.executable, "-c", LITELLM], capture_output=True, text=True,
                         env=harness_env(tmp_path, GEMINI_API_BASE=fake.root + "/v1beta",
                                         GEMINI_API_KEY="any-key"), timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    out = json.loads(ran.stdout.splitlines()[-1])
    assert out["plain"] == out["streamed"] and out["plain"].startswith("The answer is")
    assert len(out["reasoning"]) == 2 and all(out["reasoning"])
    assert out["tool"] == "The answer is 42." and out["missing"] == 404
    wire = fake.since(mark)
    assert {w["path"].rpartition(":")[2] for w in wire} == {
        "generateContent", "streamGenerateContent"}
    assert signatures(wire[-1]["request"]["contents"]) == signatures(
        [c["content"] for c in wire[-2]["response"]["candidates"]])
