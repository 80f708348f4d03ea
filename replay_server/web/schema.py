"""The OpenAPI schema (`/openapi.json`): what each route takes and what it really answers.

FastAPI derives it from the routes, but says two things this server never does: 422 for
every route with a parameter (a validation error is answered 400 here, as OpenAI and vLLM
answer it: litellm takes 422 for "unsupported parameter"), and no error bodies at all.
So the replay endpoints (plain ASGI apps, invisible to FastAPI) are described here, 422
is dropped, every error is the OpenAI envelope (an API family's own where it has one:
Anthropic's on /v1/messages, Google's on its paths; a route of an API's names its
envelope with `openapi_extra={"x-envelope": NAME}`), and 401 is listed where an API key
is asked for. A path with parameters in it (Google's `models/{model}:generateContent`)
declares them. tests/web/test_openapi.py sends each route the requests that get each status.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..paths import (
    DETOKENIZE_PATH,
    TOKENIZE_PATH,
    TOKENIZER_ENDPOINTS,
    TOKENIZER_INFO_PATH,
)
from ..wire.families import ENDPOINTS, family_of
from ..wire.tokenizer.fields import DETOKENIZE, TOKENIZE, TOKENIZE_CHAT

ERROR = {
    "type": "object", "required": ["error"], "description": "The OpenAI error envelope "
    "(sent with the header `x-should-retry: false`)",
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]},
                       "code": {"type": ["string", "integer", "null"]}}}},
}
REPLAY_ANSWERS: dict[str, dict[str, Any]] = {
    "200": {"description": "The saved response, as the original server sent it (a saved "
                           "or replayed stream when the request asks for one)",
            "content": {"application/json": {}, "text/event-stream": {}}},
    "400": {"description": "Malformed request, or a replay error (no match, ambiguous, n "
                           "mismatch, exhausted, unusable, params mismatch): `error.code` "
                           "says which"},
    "404": {"description": "Unknown model"},
    "413": {"description": "Request body over --max-body-size"},
}

TOKENIZER_ANSWERS: dict[str, dict[str, Any]] = {
    "200": {"description": "vLLM's answer: recorded, or computed with --tokenizer",
            "content": {"application/json": {}}},
    "400": {"description": "Malformed request"},
    "404": {"description": "Unknown model, or `tokenizer_unanswered`: neither a recording "
                           "nor --tokenizer can answer it (no generation is affected)"},
    "413": {"description": "Request body over --max-body-size"},
}


def _parameters(path: str) -> list[dict[str, Any]]:
    """The path parameters of a templated path (`{model}`), each a required string."""
    names = [part.split("}")[0] for part in path.split("{")[1:]]
    return [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in names]


def _tokenizer_routes() -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("post", TOKENIZE_PATH, {"anyOf": [TOKENIZE.schema("prompt", {}),
                                           TOKENIZE_CHAT.schema("messages", {})]}),
        ("post", DETOKENIZE_PATH, DETOKENIZE.schema("tokens", {})),
        ("get", TOKENIZER_INFO_PATH, None),
    ]


def _tokenizer_answers(method: str) -> dict[str, Any]:
    """What a tokenizer route answers (a GET has no body: never 400 nor 413)."""
    return {k: dict(v) for k, v in TOKENIZER_ANSWERS.items()  # (each route its own copy)
            if method != "get" or k in ("200", "404")}


def openapi(app: FastAPI, api_key: bool) -> dict[str, Any]:
    """The schema of `app`, made once; `api_key`: every route but /health asks for one."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                         description=app.description)
    envelopes = {}  # path -> its error schema's name, where not the OpenAI envelope's
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for path in ENDPOINTS:
        own = family_of(path).error_schema
        if own is not None:
            envelopes[path] = own[0]
            components[own[0]] = own[1]
        schema["paths"][path] = {"post": {
            "summary": f"Replay a saved answer ({path})",
            **({"parameters": _parameters(path)} if "{" in path else {}),
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": family_of(path).schema}}},
            "responses": {k: dict(v) for k, v in REPLAY_ANSWERS.items()}}}
    for method, path, body in _tokenizer_routes():
        operation: dict[str, Any] = {
            "summary": f"vLLM's {path}: a recorded answer, else computed with --tokenizer",
            "responses": _tokenizer_answers(method)}
        if body is not None:
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": body}}}
        schema["paths"][path] = {method: operation}
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    components["Error"] = ERROR
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            named = operation.pop("x-envelope", None)
            answers = operation["responses"]
            answers.pop("422", None)
            if api_key and path != "/health" and path not in TOKENIZER_ENDPOINTS:
                answers["401"] = {"description": "Missing or wrong API key (--api-key)"}
            for status, answer in answers.items():
                if int(status) >= 400:
                    name = named or envelopes.get(path, "Error")
                    answer["content"] = {"application/json": {
                        "schema": {"$ref": f"#/components/schemas/{name}"}}}
    app.openapi_schema = schema
    return schema
