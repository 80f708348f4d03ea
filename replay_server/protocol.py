"""Wire shapes: what the two replay endpoints accept, and the JSON Schemas that document it.

Requests are checked on plain dicts (orjson), not through a model, because this is the hot
path: only what the server needs is validated, a mistyped field is a 400 naming it, and
unknown fields are ignored, as vLLM does (`extra="allow"`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from . import keys
from .errors import BadRequest
from .records import CHAT_PATH, COMPLETION_PATH, split_prompts


@dataclass(slots=True)
class ReplayRequest:
    endpoint: str
    model: str | None
    n: int
    stream: bool
    include_usage: bool
    prompts: list[dict[str, Any]]
    data: dict[str, Any]

    def params(self) -> bytes:
        """The sampling parameters, canonical (only strict mode needs them)."""
        return keys.canonical(keys.sampling_params(self.data))


_NUMBER = (int, float)
# Optional fields whose type is checked when present and not null: name -> (types, words).
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "model": ((str,), "a string"),
    "stream": ((bool,), "a boolean"),
    "stream_options": ((dict,), "an object"),
    "echo": ((bool,), "a boolean"),
    "temperature": (_NUMBER, "a number"),
    "top_p": (_NUMBER, "a number"),
    "presence_penalty": (_NUMBER, "a number"),
    "frequency_penalty": (_NUMBER, "a number"),
    "max_tokens": ((int,), "an integer"),
    "max_completion_tokens": ((int,), "an integer"),
    "seed": ((int,), "an integer"),
    "top_logprobs": ((int,), "an integer"),
    "stop": ((str, list), "a string or a list of strings"),
    "tools": ((list,), "a list"),
    "tool_choice": ((str, dict), "a string or an object"),
    "response_format": ((dict,), "an object"),
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _check_types(data: dict[str, Any], endpoint: str) -> None:
    for name in data.keys() & _TYPES.keys():
        value = data[name]
        if value is None:
            continue
        types, words = _TYPES[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise BadRequest(f"`{name}` must be {words}, got {_type_name(value)}", param=name)
    logprobs = data.get("logprobs")
    if logprobs is not None:
        want, words = ((bool,), "a boolean") if endpoint == CHAT_PATH else ((int,), "an integer")
        if not isinstance(logprobs, want) or (endpoint != CHAT_PATH and logprobs is True):
            raise BadRequest(f"`logprobs` must be {words}, got {_type_name(logprobs)}",
                             param="logprobs")
    stop = data.get("stop")
    if isinstance(stop, list) and not all(isinstance(s, str) for s in stop):
        raise BadRequest("`stop` must be a string or a list of strings", param="stop")


def _n(data: dict[str, Any]) -> int:
    n = data.get("n")
    if n is None:
        return 1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise BadRequest(f"`n` must be an integer >= 1, got {orjson.dumps(n).decode()}",
                         param="n")
    return n


def _include_usage(data: dict[str, Any]) -> bool:
    options = data.get("stream_options")
    if options is None:
        return False
    if data.get("stream") is not True:
        raise BadRequest("`stream_options` can only be set when `stream` is true",
                         param="stream_options")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise BadRequest("`stream_options.include_usage` must be a boolean",
                         param="stream_options.include_usage")
    return include is True


def _messages(data: dict[str, Any]) -> None:
    messages = data.get("messages")
    if messages is None:
        raise BadRequest("`messages` is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list of message objects",
                         param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"`messages[{i}]` must be an object with a string `role`",
                             param=f"messages[{i}]")


def _prompts(data: dict[str, Any]) -> list[dict[str, Any]]:
    if data.get("prompt") is None:
        raise BadRequest("`prompt` is required", param="prompt")
    prompts = split_prompts(data["prompt"])
    if prompts is None:
        raise BadRequest("`prompt` must be a string, a list of strings, a list of token ids "
                         "or a list of token-id lists, and not empty", param="prompt")
    echo = data.get("echo")
    return [keys.completion_prompt(p, echo) for p in prompts]


def parse(endpoint: str, body: bytes) -> ReplayRequest:
    """A checked replay request from raw body bytes, or BadRequest naming the field."""
    if not body.strip():
        raise BadRequest("the request body is empty: send a JSON object")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, got {_type_name(data)}")
    _check_types(data, endpoint)
    if endpoint == CHAT_PATH:
        _messages(data)
        prompts = [keys.chat_prompt(data)]
    else:
        prompts = _prompts(data)
    return ReplayRequest(
        endpoint=endpoint,
        model=data.get("model"),
        n=_n(data),
        stream=data.get("stream") is True,
        include_usage=_include_usage(data),
        prompts=prompts,
        data=data,
    )


def models_body(names: list[str], created: int) -> dict[str, Any]:
    """GET /v1/models, shaped like vLLM's list."""
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "replay-server",
             "root": name, "parent": None, "max_model_len": None}
            for name in names
        ],
    }


# JSON Schemas for the OpenAPI document (what the fuzzers and readers see). They describe
# what `parse` accepts; `additionalProperties` stays open, as unknown fields are ignored.
_MESSAGE = {"type": "object", "required": ["role"], "properties": {"role": {"type": "string"}}}
_COMMON = {
    "model": {"type": "string"},
    "n": {"type": "integer", "minimum": 1},
    "stream": {"type": "boolean"},
    "stream_options": {"type": "object",
                       "properties": {"include_usage": {"type": "boolean"}}},
    "temperature": {"type": "number"},
    "top_p": {"type": "number"},
    "max_tokens": {"type": "integer"},
    "seed": {"type": "integer"},
    "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
}
CHAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        **_COMMON,
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
        "logprobs": {"type": "boolean"},
        "tools": {"type": "array", "items": {"type": "object"}},
        "tool_choice": {"anyOf": [{"type": "string"}, {"type": "object"}]},
        "response_format": {"type": "object"},
    },
}
_TOKENS = {"type": "array", "minItems": 1, "items": {"type": "integer"}}
COMPLETION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        **_COMMON,
        "prompt": {"anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": {"type": "string"}},
            _TOKENS,
            {"type": "array", "minItems": 1, "items": _TOKENS},
        ]},
        "echo": {"type": "boolean"},
        "logprobs": {"type": "integer"},
    },
}
SCHEMAS = {CHAT_PATH: CHAT_SCHEMA, COMPLETION_PATH: COMPLETION_SCHEMA}
