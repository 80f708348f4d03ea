"""Wire shapes: what the replay endpoints accept, and the JSON Schemas that document it.

Requests are checked on plain dicts (orjson), not through a model, because this is the hot
path: only what the server needs is validated, a mistyped field is a 400 naming it, and
unknown fields are ignored, as vLLM does (`extra="allow"`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BadRequest
from ..paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH
from . import keys
from . import responses as openai_responses
from .keys import Field


@dataclass(slots=True)
class ReplayRequest:
    endpoint: str
    model: str | None
    n: int
    stream: bool
    include_usage: bool
    prompts: list[dict[str, Any]]
    keys: list[bytes]
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return _KINDS[self.endpoint]

    def params(self) -> bytes:
        """The sampling parameters, canonical (only strict mode needs them)."""
        if self.endpoint == RESPONSES_PATH:
            return keys.canonical(openai_responses.sampling_params(self.data))
        return keys.canonical(keys.sampling_params(self.data, self.kind))


_KINDS = {CHAT_PATH: keys.CHAT, COMPLETION_PATH: keys.COMPLETION,
          RESPONSES_PATH: openai_responses.RESPONSES}


_PYTHON = {"string": (str,), "boolean": (bool,), "number": (int, float), "integer": (int,),
           "object": (dict,), "array": (list,)}
_WORDS = {"string": "a string", "boolean": "a boolean", "number": "a number",
          "integer": "an integer", "object": "an object", "array": "a list"}


def _fields(endpoint: str) -> dict[str, Field]:
    if endpoint == RESPONSES_PATH:
        return openai_responses.FIELDS_BY_NAME
    return keys.fields_of(_KINDS[endpoint])


def _typed(endpoint: str) -> dict[str, tuple[tuple[type, ...], bool, str]]:
    """name -> (Python types, whether a bool is allowed, the types in words), from the
    field table."""
    out = {}
    for name, f in _fields(endpoint).items():
        types = tuple(t for j in f.types for t in _PYTHON[j])
        out[name] = (types, "boolean" in f.types, " or ".join(_WORDS[j] for j in f.types))
    return out


_TYPES = {path: _typed(path) for path in _KINDS}
# name -> the classes that JSON values of its accepted types parse to, null included:
# orjson makes exact dicts, lists, strs, ints, floats and bools, never a subclass, so a
# value of one of these classes is one `_check_types` accepts (a bool is a bool, not an
# int). One set lookup per field: this is on every request.
_CLASSES = {"string": (str,), "boolean": (bool,), "number": (int, float), "integer": (int,),
            "object": (dict,), "array": (list,)}
_ACCEPTED = {path: {name: frozenset([type(None), *(c for j in f.types for c in _CLASSES[j])])
                    for name, f in _fields(path).items()}
             for path in _KINDS}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _types_ok(data: dict[str, Any], endpoint: str) -> bool:
    """Whether every known field has one of its classes: then `_check_types` passes."""
    accepted = _ACCEPTED[endpoint]
    for name, value in data.items():
        classes = accepted.get(name)
        if classes is not None and value.__class__ not in classes:
            return False
    stop = data.get("stop")
    return stop.__class__ is not list or all(s.__class__ is str for s in stop)


def _check_types(data: dict[str, Any], endpoint: str) -> None:
    """BadRequest naming the first field of a type the table does not accept."""
    typed = _TYPES[endpoint]
    for name, value in data.items():
        known = typed.get(name)
        if known is None or value is None:
            continue
        types, bools, words = known
        if not isinstance(value, types) or (value.__class__ is bool and not bools):
            raise BadRequest(f"`{name}` must be {words}, got {_type_name(value)}", param=name)
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


def parse(endpoint: str, body: bytes) -> ReplayRequest:
    """A checked replay request from raw body bytes, or BadRequest naming the field."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        if not body.strip():
            raise BadRequest("the request body is empty: send a JSON object") from None
        raise BadRequest(f"the request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, got {_type_name(data)}")
    if not _types_ok(data, endpoint):
        _check_types(data, endpoint)
    if endpoint == RESPONSES_PATH:
        return _responses(data)
    kind = _KINDS[endpoint]
    if kind == keys.CHAT:
        _messages(data)
    elif data.get("prompt") is None:
        raise BadRequest("`prompt` is required", param="prompt")
    try:
        prompts = keys.prompts(kind, data)
        if prompts is None:
            raise BadRequest("`prompt` must be a string, a list of strings, a list of token "
                             "ids or a list of token-id lists, and not empty", param="prompt")
        hashed = [keys.key_of(p) for p in prompts]
    except (RecursionError, keys.Unkeyable):
        raise BadRequest("the request nests JSON objects or lists too deeply to be keyed "
                         "(at most about 250 levels)") from None
    n = 1 if data.get("n") is None else _n(data)
    include_usage = data.get("stream_options") is not None and _include_usage(data)
    return ReplayRequest(endpoint, data.get("model"), n, data.get("stream") is True,
                         include_usage, prompts, hashed, data)


def _responses(data: dict[str, Any]) -> ReplayRequest:
    """A Responses request. Its key is made once the model is known (`responses_key`): a
    `previous_response_id` is keyed by the conversation that model's saved response holds."""
    if data.get("input") is None:
        raise BadRequest("`input` is required", param="input")
    return ReplayRequest(endpoint=RESPONSES_PATH, model=data.get("model"), n=1,
                         stream=data.get("stream") is True, include_usage=False, prompts=[],
                         keys=[], data=data)


def responses_key(request: ReplayRequest, previous: dict[str, Any] | None) -> None:
    """Set a Responses request's keyed prompt and key; `previous` is what its
    `previous_response_id` names (`openai_responses.previous_of`)."""
    try:
        prompt = openai_responses.keyed_input(request.data, previous)
        request.keys = [keys.key_of(prompt)]
    except (RecursionError, keys.Unkeyable):
        raise BadRequest("the request nests JSON objects or lists too deeply to be keyed "
                         "(at most about 250 levels)") from None
    request.prompts = [prompt]


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


# JSON Schemas for the OpenAPI document (what the fuzzers and readers see), derived from the
# field table that `_check_types` checks. `additionalProperties` stays open: unknown fields
# are ignored.
def _schema(endpoint: str, required: str, special: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, f in _fields(endpoint).items():
        types = list(f.types)
        properties[name] = {"type": types[0]} if len(types) == 1 else {"type": types}
        properties[name]["description"] = f"{f.role}: {f.reason}"
    for name, extra in special.items():  # an `anyOf` replaces the table's plain types
        base = {"description": properties[name]["description"]} if "anyOf" in extra \
            else properties[name]
        properties[name] = {**base, **extra}
    return {"type": "object", "required": [required], "properties": properties}


_MESSAGE = {"type": "object", "required": ["role"], "properties": {"role": {"type": "string"}}}
_TOKENS = {"type": "array", "minItems": 1, "items": {"type": "integer"}}
_COMMON = {
    "n": {"minimum": 1},
    "stream_options": {"properties": {"include_usage": {"type": "boolean"}}},
    "stop": {"items": {"type": "string"}},
}
CHAT_SCHEMA = _schema(CHAT_PATH, "messages", {
    **_COMMON, "messages": {"minItems": 1, "items": _MESSAGE}})
COMPLETION_SCHEMA = _schema(COMPLETION_PATH, "prompt", {
    **_COMMON,
    "prompt": {"anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1, "items": {"type": "string"}},
        _TOKENS,
        {"type": "array", "minItems": 1, "items": _TOKENS},
    ]}})
RESPONSES_SCHEMA = _schema(RESPONSES_PATH, "input", {
    "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]}})
SCHEMAS = {CHAT_PATH: CHAT_SCHEMA, COMPLETION_PATH: COMPLETION_SCHEMA,
           RESPONSES_PATH: RESPONSES_SCHEMA}
