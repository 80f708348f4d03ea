"""A saved chat exchange: its request holds one conversation (`messages`), and its
response is choices of messages (`choices/answer.py`), a message with any answer field
set being an answer (a refusal is one too; an empty string as well)."""

from __future__ import annotations

from typing import Any

from ..answer import MISSING, BadAnswer, want
from ..choices import answer as choices

# A saved message with any of these set is an answer (a refusal is one too).
ANSWER_FIELDS = ("content", "refusal", "tool_calls", "function_call", "reasoning",
                 "reasoning_content")


def saved_request(request: dict[str, Any]) -> None:
    """A saved request holds a non-empty list of message objects."""
    messages = request.get("messages", MISSING)
    if type(messages) is not list:
        messages = want("messages", messages, list)
    for message in messages:
        if type(message) is not dict and not isinstance(message, dict):
            break
    else:
        if messages:
            return
    raise BadAnswer("messages", "expected a non-empty list of message objects")


def saved_answer(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    return choices.saved_answer(body, "message", _unusable)


def _unusable(choice: dict[str, Any], message: Any) -> str | None:
    if not isinstance(message, dict):
        return "saved message is null or missing"
    if message.get("content") is None and all(message.get(f) is None for f in ANSWER_FIELDS):
        return "saved message has no content, refusal, reasoning or tool calls"
    return None
