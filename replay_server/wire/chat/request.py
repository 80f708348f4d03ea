"""A chat request: the checks it must pass, and its keyed prompt."""

from __future__ import annotations

from typing import Any

from ...errors import BadRequest
from .fields import TABLE


def check(data: dict[str, Any]) -> None:
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


def prompt(request: dict[str, Any]) -> dict[str, Any]:
    """The keyed prompt of a chat request or saved record: its messages and every other
    key field it sets, normalised (`fields`)."""
    return TABLE.prompt(request, {"messages": TABLE.normal("messages",
                                                           request.get("messages") or [])})


def prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
            ) -> list[dict[str, Any]]:
    return [prompt(request)]
