"""A saved Messages exchange: its request holds a conversation (`messages`), and its
response is a finished message (an empty `content` too), never an error; a saved
count_tokens answer is its `input_tokens`."""

from __future__ import annotations

from typing import Any

import orjson

from ..answer import MISSING, BadAnswer, generation_id, typed_list, want
from ..json_types import type_name


def saved_request(request: dict[str, Any]) -> None:
    """A saved request (of a message, or of a count) holds a non-empty list of message
    objects."""
    messages = request.get("messages")
    if not (isinstance(messages, list) and messages
            and all(isinstance(m, dict) for m in messages)):
        raise BadAnswer("messages", "expected a non-empty list of message objects")


def saved_answer(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The message, checked for shape; and why it is not an answer (an error; a message
    never finished, with no `stop_reason`), or None."""
    if body.get("type") == "error":
        return body, ("the saved answer is an error: "
                      f"{orjson.dumps(body.get('error')).decode()[:200]}")
    typed_list(body, "content", "a block object")
    stop = body.get("stop_reason")
    if stop is not None and not isinstance(stop, str):
        raise BadAnswer("stop_reason", f"expected a string or null, got {type_name(stop)}")
    return body, None if stop is not None else \
        "the saved message has no `stop_reason`: unfinished"


def saved_count(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A saved count_tokens answer: `input_tokens`, an integer."""
    want("input_tokens", body.get("input_tokens", MISSING), int)
    return body, None


def generations(body: dict[str, Any]) -> list[bytes]:
    """A message is one generation: its content blocks (thinking signatures and tool call
    ids included: a later turn sends them back), `stop_reason` and `stop_sequence`."""
    return [generation_id({k: body.get(k) for k in ("content", "stop_reason",
                                                      "stop_sequence")})]
