"""A Messages request (or a count_tokens one): the checks it must pass, its keyed prompt,
and whether a request is Anthropic's at all."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...errors import BadRequest
from ...paths import MESSAGES_PATH
from .fields import COUNT_TABLE, TABLE


def check(data: dict[str, Any]) -> None:
    found = data.get("messages")
    if not isinstance(found, list) or not found:
        raise BadRequest("`messages` is required: a non-empty list of messages",
                         param="messages")
    for i, value in enumerate(found):
        if not isinstance(value, dict):
            raise BadRequest(f"`messages[{i}]` must be an object", param="messages")


def check_count(data: dict[str, Any]) -> None:
    check(data)
    if data.get("stream") is not None:
        raise BadRequest("count_tokens does not stream: leave `stream` out", param="stream")


def prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
            ) -> list[dict[str, Any]] | None:
    """The one keyed prompt: `{"v", "kind": "messages", "messages", <key fields>}` (None
    for `messages` of no valid form)."""
    found = request.get("messages")
    if not isinstance(found, list):
        return None
    return [TABLE.prompt(request, {"messages": TABLE.normal("messages", found)})]


def count_prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
                  ) -> list[dict[str, Any]] | None:
    """The keyed prompt of a count_tokens request: its own kind, the same forms."""
    found = request.get("messages")
    if not isinstance(found, list):
        return None
    return [COUNT_TABLE.prompt(request, {"messages": COUNT_TABLE.normal("messages", found)})]


def anthropic(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request is Anthropic's: it carries `anthropic-version`, as Anthropic's SDK
    and every client of its API send. It tells the two APIs apart on the paths they share
    (`GET /v1/models`) and on errors for no endpoint's request (an unknown route)."""
    return any(name == b"anthropic-version" for name, _ in headers)


def below(path: str, query: str) -> bool:
    """Whether a request on no endpoint is Anthropic's by its path: one below
    /v1/messages (its Message Batches), whatever headers it carries."""
    return path.startswith(MESSAGES_PATH + "/")
