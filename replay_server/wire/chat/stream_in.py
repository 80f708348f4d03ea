"""A chat stream in: how one choice's delta adds to the answer being aggregated (the
stream itself is read in `choices/stream_in.py`)."""

from __future__ import annotations

from typing import Any

from ..choices.stream_in import Choice, ChoicesAggregator

TEXTS = frozenset({"content", "reasoning", "reasoning_content", "refusal"})


def new_choice(index: int) -> dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": None}}


def merge(choice: Choice, part: dict[str, Any]) -> None:
    """Texts are concatenated, tool calls merged by their index, any other message field
    takes its last value."""
    message = choice.body["message"]
    for key, value in (part.get("delta") or {}).items():
        if value is None:
            continue
        if key in TEXTS:
            choice.add(message, key, value)
        elif key == "role":
            message["role"] = value
        elif key == "tool_calls":
            _tool_calls(choice, message.setdefault("tool_calls", []), value)
        elif key == "function_call":
            _function(choice, message.setdefault("function_call", {}), value)
        else:
            message[key] = value
    choice.common(part)


def _tool_calls(choice: Choice, calls: list[dict[str, Any]], deltas: list[dict[str, Any]]
                ) -> None:
    for delta in deltas:
        index = delta.get("index", len(calls))
        while len(calls) <= index:
            calls.append({})
        call = calls[index]
        for key, value in delta.items():
            if key == "index" or value is None:
                continue
            if key == "function":
                _function(choice, call.setdefault("function", {}), value)
            else:
                call[key] = value


def _function(choice: Choice, function: dict[str, Any], delta: dict[str, Any]) -> None:
    """Arguments arrive in pieces; the name (and anything else) arrives once."""
    for key, value in delta.items():
        if key == "arguments" and value is not None:
            choice.add(function, key, value)
        elif value is not None and function.get(key) is None:
            function[key] = value


def repeat(choice: Choice, part: dict[str, Any]) -> tuple[dict[str, Any], str, list[str]] | None:
    """Where the one text of a delta that adds nothing else is (see ChoicesAggregator)."""
    delta = part.get("delta")
    if delta.__class__ is not dict or len(delta) != 1 or part.get("logprobs") is not None:
        return None
    name, text = next(iter(delta.items()))
    if name not in TEXTS or text.__class__ is not str:
        return None
    return delta, name, choice.pieces(choice.body["message"], name)


def aggregator() -> ChoicesAggregator:
    return ChoicesAggregator("chat.completion", merge, repeat, new_choice)
