"""A tokenizer request: which form it is (vLLM's union: a `prompt` makes it a
`TokenizeCompletionRequest`, else `messages` a `TokenizeChatRequest`), the checks vLLM
makes of it, and its keyed prompt and key; and the checks a recorded answer must pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ...errors import BadRequest
from ...paths import DETOKENIZE_PATH, TOKENIZE_PATH, TOKENIZER_INFO_PATH
from ..chat.request import check as check_messages
from ..json_types import type_name
from ..keys import Table, Unkeyable, key_of
from .fields import DETOKENIZE, TOKENIZE, TOKENIZE_CHAT, TOKENIZER_INFO


@dataclass(frozen=True, slots=True)
class TokenizerRequest:
    """A checked tokenizer request: its endpoint, its form's table (`kind`), the model it
    names, the request as sent, and its keyed prompt's key."""

    endpoint: str
    table: Table
    model: str | None
    data: dict[str, Any]
    key: bytes

    @property
    def kind(self) -> str:
        return self.table.kind


def table_of(endpoint: str, data: dict[str, Any]) -> Table:
    """The table of a request's form (KeyError for a path that is no tokenizer endpoint)."""
    if endpoint == TOKENIZE_PATH:
        return TOKENIZE if "prompt" in data or "messages" not in data else TOKENIZE_CHAT
    return {DETOKENIZE_PATH: DETOKENIZE, TOKENIZER_INFO_PATH: TOKENIZER_INFO}[endpoint]


def check(endpoint: str, data: dict[str, Any]) -> Table:
    """The request's table, once the request passes vLLM's checks (else BadRequest)."""
    table = table_of(endpoint, data)
    table.check(data)
    if table is TOKENIZE and not isinstance(data.get("prompt"), str):
        raise BadRequest("`prompt` (a string) or `messages` is required", param="prompt")
    if table is TOKENIZE_CHAT:
        check_messages(data)
        if data.get("continue_final_message") and data.get("add_generation_prompt"):
            raise BadRequest("Cannot set both `continue_final_message` and "
                             "`add_generation_prompt` to True.")
    if table is DETOKENIZE:
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise BadRequest("`tokens` (a list of token ids) is required", param="tokens")
        if any(t < 0 for t in tokens):
            raise BadRequest("`tokens` must be token ids (integers >= 0)", param="tokens")
    return table


def key(table: Table, data: dict[str, Any]) -> bytes:
    """The key of a checked request (its table's key fields, normalised)."""
    try:
        return key_of(table.prompt(data, {}))
    except Unkeyable as e:
        raise table.too_deep(e) from None


def parse(endpoint: str, body: bytes) -> TokenizerRequest:
    """A checked tokenizer request from its body (empty for GET /tokenizer_info), or
    BadRequest naming the field."""
    if endpoint == TOKENIZER_INFO_PATH and not body.strip():
        data: Any = {}
    else:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
    if data.__class__ is not dict:
        raise BadRequest(f"the request body must be a JSON object, got {type_name(data)}")
    table = check(endpoint, data)
    model = data.get("model")
    return TokenizerRequest(endpoint, table, model if isinstance(model, str) else None,
                            data, key(table, data))


def answer_problem(endpoint: str, response: Any) -> str | None:
    """Why a saved answer is not one vLLM sends for this endpoint, or None."""
    if not isinstance(response, dict):
        return f"expected an object, got {type_name(response)}"
    if endpoint == TOKENIZE_PATH:
        tokens = response.get("tokens")
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            return "`tokens` must be a list of token ids"
        if response.get("count") != len(tokens):
            return "`count` must be the number of `tokens`"
    elif endpoint == DETOKENIZE_PATH and not isinstance(response.get("prompt"), str):
        return "`prompt` must be a string"
    return None
