"""Google's Gemini API on the fake model, as the google-genai SDK, inspect_ai's `google/`
provider and LiteLLM's `gemini/` models call it; the shapes are in gemini_bodies.py.

Routes, under any of the API versions `v1`, `v1beta`, `v1alpha` (the Gemini Developer API)
and `v1beta1` (Vertex AI's default):
- `POST /{version}/models/{model}:generateContent`, `:streamGenerateContent` and
  `:countTokens`; `GET /{version}/models` (`pageSize`, `pageToken`) and
  `/{version}/models/{model}`. `GET /v1/models` is also the OpenAI list: server.py sends it
  here when the request is Google's (`asks_google`);
- Vertex AI's forms of the same: `/{version}/projects/{p}/locations/{l}/publishers/google/
  models/{model}:{method}` (project and location ignored), `/{version}/publishers/google/
  models/{model}:{method}` (express mode, an API key and no project), and
  `GET /{version}/publishers/google/models[/{model}]`.

`streamGenerateContent?alt=sse` sends each chunk as one `data: ` event (CRLF-framed, no
`[DONE]`); without `alt=sse` the chunks are one JSON array, sent piece by piece, as the REST
API sends them. Any key is accepted, by `x-goog-api-key`, `?key=` or `Authorization: Bearer`;
without one the Developer API's 403 PERMISSION_DENIED (Vertex AI's 401 UNAUTHENTICATED).
Errors are Google's envelope `{"error": {"code", "message", "status"}}`: 400
INVALID_ARGUMENT for a malformed body (or a thought signature the fake did not give), 404
NOT_FOUND for a model that is neither served (`--model`) nor named gemini-*/gemma-*, or an
unknown method; a conversation holding `[fault: 429]` gets 429 RESOURCE_EXHAUSTED (with a
10 ms RetryInfo) and `[fault: hang]` no answer (faults.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakemodel.behaviour import FakeModel
from tests.fakemodel.faults import Faults, respond
from tests.fakemodel.gemini_bodies import (
    build_response,
    chat_messages,
    chunks,
    field,
    signature_ok,
    token_count,
)

VERSIONS = ("v1", "v1beta", "v1alpha", "v1beta1")
METHODS = ("generateContent", "streamGenerateContent", "countTokens")
STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}
NO_KEY = {
    False: (403, "Method doesn't allow unregistered callers (callers without established "
                 "identity). Please use API Key or other form of API consumer identity to "
                 "call this API."),
    True: (401, "Request is missing required authentication credential. Expected OAuth 2 "
                "access token, login cookie or other valid authentication credential."),
}
RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.010s"}
PUBLISHER = "/publishers/google/models"


def error(code: int, message: str, details: list[Any] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message, "status": STATUSES[code]}
    if details:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=code)


def _key(request: Request) -> str | None:
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    return request.headers.get("x-goog-api-key") or request.query_params.get("key") or bearer


def asks_google(request: Request) -> bool:
    """A model list asked in Google's way (its key header or query parameters), not
    OpenAI's: both are `GET /v1/models`."""
    query = request.query_params
    return bool(request.headers.get("x-goog-api-key")) or any(
        name in query for name in ("key", "pageSize", "pageToken"))


def _version(request: Request) -> str:
    return request.url.path.split("/")[1]


def _refused(request: Request) -> Response | None:
    """The error of a request the API refuses before reading it: a version it does not
    serve, or no key."""
    if _version(request) not in VERSIONS:
        return error(404, f"API version {_version(request)} is not served.")
    if not _key(request):
        return error(*NO_KEY[PUBLISHER in request.url.path])
    return None


def _known(fm: FakeModel, model: str) -> bool:
    return model in fm.models or model.startswith(("gemini", "gemma"))


def _model(name: str, vertex: bool) -> dict[str, Any]:
    if vertex:
        return {"name": f"publishers/google/models/{name}", "versionId": "001",
                "openSourceCategory": "PROPRIETARY", "launchStage": "GA"}
    return {"name": f"models/{name}", "version": "001", "displayName": name,
            "description": "A deterministic fake model (tests only).",
            "inputTokenLimit": 4096, "outputTokenLimit": 4096,
            "supportedGenerationMethods": ["generateContent", "countTokens"], "temperature": 1,
            "topP": 0.95, "topK": 64, "maxTemperature": 2, "thinking": True}


async def model_list(fm: FakeModel, request: Request) -> Response:
    """`models.list`: the served models, a page at a time (`pageSize`, `pageToken`)."""
    if (refused := _refused(request)) is not None:
        return refused
    vertex, query = PUBLISHER in request.url.path, request.query_params
    if not all(query.get(name, "0").isdigit() for name in ("pageToken", "pageSize")):
        return error(400, "Invalid page token or page size.")
    start, size = int(query.get("pageToken") or 0), int(query.get("pageSize") or 50)
    page = [_model(m, vertex) for m in fm.models[start:start + size]]
    out: dict[str, Any] = {"publisherModels" if vertex else "models": page}
    if start + size < len(fm.models):
        out["nextPageToken"] = str(start + size)
    return JSONResponse(out)


def _signatures_ok(body: dict[str, Any]) -> bool:
    return all(signature_ok(part[name]) for content in field(body, "contents") or []
               if isinstance(content, dict) for part in field(content, "parts") or []
               if isinstance(part, dict)
               for name in ("thoughtSignature", "thought_signature") if name in part)


def _framed(pieces: list[dict[str, Any]], sse: bool) -> Iterator[str]:
    """A stream's chunks as `data: ` events, or as one JSON array (without alt=sse)."""
    for i, piece in enumerate(pieces):
        if sse:
            yield f"data: {json.dumps(piece, ensure_ascii=False)}\r\n\r\n"
        else:
            yield ("[" if i == 0 else "\n,\r\n") + json.dumps(piece, indent=2)
    if not sse:
        yield "\n]"


def _addressed(fm: FakeModel, request: Request) -> tuple[str, str] | Response:
    """The (model, method) a POST asks for, or the error of one the API refuses unread."""
    model, _, method = request.path_params["call"].rpartition(":")
    if (refused := _refused(request)) is not None:
        return refused
    if method not in METHODS or not model:
        return error(404, f"Method {method!r} is not found.")
    if not _known(fm, model):
        return error(404, f"models/{model} is not found for API version {_version(request)}, "
                          f"or is not supported for {method}. Call ListModels to see the list "
                          "of available models and their supported methods.")
    return model, method


async def _body(request: Request) -> dict[str, Any] | Response:
    try:
        body = json.loads(await request.body())
    except ValueError as e:
        return error(400, f"Invalid JSON payload received. {e}")
    if not isinstance(body, dict):
        return error(400, "Invalid JSON payload received. Expected an object.")
    return body


async def _faulty(kind: str, request: Request) -> Response:
    if kind == "429":
        return error(429, "Resource has been exhausted (e.g. check quota).", [RETRY_INFO])
    return await respond(kind, request)


def _streamed(pieces: list[dict[str, Any]], sse: bool) -> Response:
    async def gen() -> AsyncIterator[str]:
        for text in _framed(pieces, sse):
            yield text

    return StreamingResponse(gen(), media_type="text/event-stream" if sse else "application/json")


def routes(fm: FakeModel) -> list[Route]:
    faults = Faults()

    def answer(model: str, method: str, body: dict[str, Any], vertex: bool) -> dict[str, Any]:
        if method == "countTokens":
            return token_count(body)
        if not _signatures_ok(body):
            raise ValueError("Corrupted thought signature.")
        return build_response(fm, body, model, vertex)

    async def call(request: Request) -> Response:
        if request.method == "GET":
            return await get_model(request)
        addressed, body = _addressed(fm, request), await _body(request)
        for refused in (addressed, body):
            if isinstance(refused, Response):
                return refused
        assert isinstance(addressed, tuple) and isinstance(body, dict)
        (model, method), log = addressed, {"path": request.url.path, "request": body}
        try:
            conversation = chat_messages(field(body, "generateContentRequest") or body)
            if (fault := faults.of({"messages": conversation})) is not None:
                fm.log({**log, "fault": fault})
                return await _faulty(fault, request)
            out = answer(model, method, body, PUBLISHER in request.url.path)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            bad = error(400, str(e).strip("'\""))
            fm.log({**log, "status": 400, "response": json.loads(bytes(bad.body))})
            return bad
        if method != "streamGenerateContent":
            fm.log({**log, "response": out})
            return JSONResponse(out)
        pieces = chunks(out)
        fm.log({**log, "response": out, "chunks": pieces})
        return _streamed(pieces, request.query_params.get("alt") == "sse")

    async def get_model(request: Request) -> Response:
        if (refused := _refused(request)) is not None:
            return refused
        name = request.path_params["call"]
        if not _known(fm, name):
            return error(404, f"models/{name} is not found for API version "
                              f"{_version(request)}.")
        return JSONResponse(_model(name, PUBLISHER in request.url.path))

    async def listed(request: Request) -> Response:
        return await model_list(fm, request)

    return [Route("/{version}/models", listed, methods=["GET"]),
            Route("/{version}/models/{call}", call, methods=["GET", "POST"]),
            Route("/{version}" + PUBLISHER, listed, methods=["GET"]),
            Route("/{version}" + PUBLISHER + "/{call}", call, methods=["GET", "POST"]),
            Route("/{version}/projects/{project}/locations/{location}" + PUBLISHER + "/{call}",
                  call, methods=["GET", "POST"])]
