"""The OpenAPI schema says what each route really answers: every route, every status it
documents sent by some request, and no request answered with a status it does not
document. And nothing the server sends needs the network (no /docs page from a CDN)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from replay_server.paths import COUNT_TOKENS_PATH, GEMINI_COUNT_PATH, GEMINI_PATH
from replay_server.saved.record import Record
from replay_server.settings import Settings
from replay_server.web.app import create_app
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    gemini_contents,
    gemini_record,
    gemini_response,
    message_record,
    message_response,
    tokenizer_record,
    user,
)
from tests.web.test_http import responses_record

RECORDS = [chat_record("q", chat_response("a")),
           completion_record("p", completion_response(" b"), line=2), responses_record(),
           tokenizer_record("/tokenize", {"model": MODEL, "prompt": "p"},
                            {"count": 1, "max_model_len": 64, "tokens": [7],
                             "token_strs": None}, line=3),
           tokenizer_record("/detokenize", {"tokens": [7]}, {"prompt": "p"}, line=4),
           tokenizer_record("/tokenizer_info", {}, {"tokenizer_class": "X"}, line=5),
           message_record("m", message_response("c"), line=6),
           message_record("m", {"input_tokens": 3}, line=7, endpoint=COUNT_TOKENS_PATH),
           gemini_record("g", gemini_response("d"), line=8),
           gemini_record("g", {"totalTokens": 3}, line=9, endpoint=GEMINI_COUNT_PATH)]
GENERATE = f"/v1beta/models/{MODEL}:generateContent"
COUNT = f"/v1/models/{MODEL}:countTokens"
BIG = "x" * 5000
# route -> requests (query, JSON body) that, between them, get every answer it can give
VERTEX_MODELS = "/{version}/publishers/google/models"
VERTEX_PROJECT = "/{version}/projects/{project}/locations/{location}/publishers/google/models"
REQUESTS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("GET", "/health"): [{}],
    ("GET", "/v1/models"): [{}],
    ("GET", "/v1/responses/{response_id}"): [
        {"path": "/v1/responses/resp_1"}, {"path": "/v1/responses/resp_1?stream=true"},
        {"path": "/v1/responses/resp_2"}, {"path": "/v1/responses/resp_1?stream=maybe"}],
    ("POST", "/v1/responses/{response_id}/cancel"): [{"path": "/v1/responses/resp_1/cancel"}],
    ("GET", "/replay/status"): [{}],
    ("GET", "/replay/misses"): [{}],
    ("POST", "/replay/reset"): [{}],
    ("POST", "/v1/chat/completions"): [
        {"json": {"model": MODEL, "messages": user("q")}},
        {"json": {"model": MODEL, "messages": user("never saved")}},
        {"json": {"model": "no/such", "messages": user("q")}},
        {"json": {"model": MODEL, "messages": user(BIG)}}],
    ("POST", "/v1/completions"): [
        {"json": {"model": MODEL, "prompt": "p"}}, {"json": {"model": MODEL}},
        {"json": {"model": "no/such", "prompt": "p"}},
        {"json": {"model": MODEL, "prompt": BIG}}],
    ("POST", "/v1/responses"): [
        {"json": {"model": MODEL, "input": "hi"}}, {"json": {"model": MODEL, "input": 3}},
        {"json": {"model": "no/such", "input": "hi"}},
        {"json": {"model": MODEL, "input": BIG}}],
    ("POST", "/tokenize"): [
        {"json": {"model": MODEL, "prompt": "p"}}, {"json": {"model": MODEL, "prompt": 3}},
        {"json": {"model": MODEL, "prompt": "never recorded"}},
        {"json": {"model": MODEL, "prompt": BIG}}],
    ("POST", "/detokenize"): [
        {"json": {"model": MODEL, "tokens": [7]}}, {"json": {"tokens": "7"}},
        {"json": {"model": "no/such", "tokens": [7]}},
        {"json": {"model": MODEL, "tokens": [7] * 2000}}],
    ("GET", "/tokenizer_info"): [{}],
    ("POST", "/v1/messages"): [
        {"json": {"model": MODEL, "max_tokens": 5, "messages": user("m")}},
        {"json": {"model": MODEL, "messages": []}},
        {"json": {"model": "no/such", "messages": user("m")}},
        {"json": {"model": MODEL, "messages": user(BIG)}}],
    ("POST", "/v1/messages/count_tokens"): [
        {"json": {"model": MODEL, "messages": user("m")}},
        {"json": {"model": MODEL, "messages": user("m"), "stream": True}},
        {"json": {"model": "no/such", "messages": user("m")}},
        {"json": {"model": MODEL, "messages": user(BIG)}}],
    ("POST", GEMINI_PATH): [
        {"path": GENERATE, "json": {"contents": gemini_contents("g")}},
        {"path": GENERATE, "json": {"contents": []}},
        {"path": "/v1beta/models/no-such:generateContent",
         "json": {"contents": gemini_contents("g")}},
        {"path": GENERATE, "json": {"contents": gemini_contents(BIG)}}],
    ("POST", GEMINI_COUNT_PATH): [
        {"path": COUNT, "json": {"contents": gemini_contents("g")}},
        {"path": COUNT, "json": {"contents": "g"}},
        {"path": "/v1/models/no-such:countTokens", "json": {"contents": gemini_contents("g")}},
        {"path": COUNT, "json": {"contents": gemini_contents(BIG)}}],
    ("GET", "/{version}/models"): [{"path": "/v1beta/models"}, {"path": "/v2/models"}],
    ("GET", "/{version}/models/{model}"): [{"path": f"/v1beta/models/{MODEL}"},
                                           {"path": "/v1beta/models/no-such"}],
    ("GET", VERTEX_MODELS): [{"path": "/v1beta1/publishers/google/models"},
                             {"path": "/v2/publishers/google/models"}],
    ("GET", VERTEX_MODELS + "/{model}"): [
        {"path": f"/v1beta1/publishers/google/models/{MODEL}"},
        {"path": "/v1beta1/publishers/google/models/no-such"}],
    ("GET", VERTEX_PROJECT + "/{model}"): [
        {"path": f"/v1/projects/p/locations/l/publishers/google/models/{MODEL}"},
        {"path": "/v1/projects/p/locations/l/publishers/google/models/no-such"}],
}
# The batch protocols' routes, in this order: <file>, <batch> and <msgbatch> stand for the
# ids the first upload and creations got (two of each: the second is over --max-batches)
LINE = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": MODEL, "messages": user("q")}}
UPLOAD = {"files": {"file": ("in.jsonl", orjson.dumps(LINE))}, "data": {"purpose": "batch"}}
CREATE = {"input_file_id": "<file>", "endpoint": "/v1/chat/completions",
          "completion_window": "24h"}
MESSAGE_BATCH = {"requests": [{"custom_id": "a", "params": {
    "model": MODEL, "max_tokens": 5, "messages": user("m")}}]}
ONE = "/v1/messages/batches/{batch_id}"
REQUESTS.update({
    ("POST", "/v1/files"): [UPLOAD, UPLOAD, {"json": {}},
                            {**UPLOAD, "files": {"file": ("big.jsonl", BIG.encode())}}],
    ("GET", "/v1/files"): [{}, {"path": "/v1/files?limit=0"}],
    ("GET", "/v1/files/{file_id}"): [{"path": "/v1/files/<file>"},
                                     {"path": "/v1/files/file-none"}],
    ("GET", "/v1/files/{file_id}/content"): [{"path": "/v1/files/<file>/content"},
                                             {"path": "/v1/files/file-none/content"}],
    ("POST", "/v1/batches"): [{"json": CREATE}, {"json": CREATE},
                              {"json": {**CREATE, "input_file_id": 3}},
                              {"json": {**CREATE, "input_file_id": "file-none"}}],
    ("GET", "/v1/batches"): [{}, {"path": "/v1/batches?limit=0"}],
    ("GET", "/v1/batches/{batch_id}"): [{"path": "/v1/batches/<batch>"},
                                        {"path": "/v1/batches/batch_none"}],
    ("POST", "/v1/batches/{batch_id}/cancel"): [{"path": "/v1/batches/<batch>/cancel"},
                                                {"path": "/v1/batches/batch_none/cancel"}],
    ("DELETE", "/v1/files/{file_id}"): [{"path": "/v1/files/<file>"},
                                        {"path": "/v1/files/<file>"}],
    ("POST", "/v1/messages/batches"): [{"json": MESSAGE_BATCH}, {"json": MESSAGE_BATCH},
                                       {"json": {"requests": []}}],
    ("GET", "/v1/messages/batches"): [{}, {"path": "/v1/messages/batches?limit=0"}],
    ("GET", ONE): [{"path": ONE.replace("{batch_id}", b)} for b in ("<msgbatch>", "none")],
    ("GET", ONE + "/results"): [{"path": ONE.replace("{batch_id}", b) + "/results"}
                                for b in ("<msgbatch>", "none")],
    ("POST", ONE + "/cancel"): [{"path": ONE.replace("{batch_id}", b) + "/cancel"}
                                for b in ("<msgbatch>", "none")],
    ("DELETE", ONE): [{"path": ONE.replace("{batch_id}", b)} for b in ("<msgbatch>", "none")],
})
GOOGLE = (GEMINI_PATH, GEMINI_COUNT_PATH, "/{version}/models", "/{version}/models/{model}",
          VERTEX_MODELS, VERTEX_MODELS + "/{model}", VERTEX_PROJECT + "/{model}")


def documented(schema: dict[str, Any]) -> dict[tuple[str, str], set[int]]:
    return {(method.upper(), path): {int(status) for status in operation["responses"]}
            for path, operations in schema["paths"].items()
            for method, operation in operations.items()}


async def answered(settings: Settings, headers: dict[str, str],
                   records: list[Record] = RECORDS
                   ) -> tuple[dict[str, Any], dict[tuple[str, str], set[int]]]:
    """The app's schema, and the statuses it answered on each route to `REQUESTS`."""
    app = create_app(settings, build(records))
    seen: dict[tuple[str, str], set[int]] = {}
    ids: dict[str, str] = {}  # the first id of each kind answered (<file>, ...)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test", headers=headers) as client:
        schema = (await client.get("/openapi.json")).json()
        for (method, path), requests in REQUESTS.items():
            for request in requests:
                url = str(request.get("path", path))
                body = orjson.loads(orjson.dumps(request.get("json")).replace(
                    b"<file>", ids.get("file", "none").encode()))
                for kind, value in ids.items():
                    url = url.replace(f"<{kind}>", value)
                r = await client.request(method, url, json=body, files=request.get("files"),
                                         data=request.get("data"))
                seen.setdefault((method, path), set()).add(r.status_code)
                if r.status_code == 200 and r.headers.get("content-type") == "application/json":
                    found = r.json().get("id") if isinstance(r.json(), dict) else None
                    kind = str(found).split("-")[0].split("_")[0]
                    if kind in ("file", "batch", "msgbatch"):
                        ids.setdefault(kind, str(found))
    return schema, seen


def _settings(api_key: str | None) -> Settings:
    return Settings(max_body_size=4000, api_key=api_key, max_upload_size=4000, max_batches=1)


@pytest.mark.parametrize("api_key", [None, "sesame"])
async def test_the_schema_lists_what_each_route_answers(api_key: str | None) -> None:
    schema, seen = await answered(_settings(api_key),
                                  {"authorization": f"Bearer {api_key}"} if api_key else {})
    assert set(documented(schema)) == set(REQUESTS)  # every route, and a test of each
    # and once more with no recorded tokenizer answer (GET /tokenizer_info is then a 404)
    _, unrecorded = await answered(_settings(api_key),
                                   {"authorization": f"Bearer {api_key}"} if api_key else {},
                                   RECORDS[:3])
    for route, statuses in unrecorded.items():
        seen[route] |= statuses
    if api_key:  # and once more without the key: refused but /health
        _, refused = await answered(_settings(api_key), {})
        for route, statuses in refused.items():
            seen[route] |= statuses
    assert documented(schema) == seen


async def test_every_error_is_documented_as_the_envelope() -> None:
    schema, _ = await answered(Settings(), {})
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    content = response["content"]["application/json"]["schema"]
                    name = "AnthropicError" if path.startswith("/v1/messages") else \
                        "GoogleError" if path in GOOGLE else "Error"
                    assert content == {"$ref": f"#/components/schemas/{name}"}, (method, path)
    envelope = schema["components"]["schemas"]["Error"]
    assert envelope["properties"]["error"]["required"] == ["message", "type", "param", "code"]
    anthropic = schema["components"]["schemas"]["AnthropicError"]
    assert anthropic["properties"]["error"]["required"] == ["type", "message"]
    google = schema["components"]["schemas"]["GoogleError"]
    assert google["properties"]["error"]["required"] == ["code", "message", "status"]


async def test_no_page_needs_the_network() -> None:
    """FastAPI's /docs and /redoc pages load their scripts from a CDN: blank offline. The
    schema is /openapi.json, for any OpenAPI viewer."""
    app = create_app(Settings(), build(RECORDS))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert (await client.get(page)).status_code == 404
        assert (await client.get("/openapi.json")).status_code == 200
