"""A saved chat or completions body, as both families check and read it: a non-empty list
of choices, put in index order, each holding the family's answer (`message`, `text`);
one generation per choice.

The streamed replay takes a saved choice apart, so a wrong shape is a bad saved line, not
a 500 on some request: a choice's `message`, where it has one, is checked field by field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..answer import MISSING, BadAnswer, generation_id, want
from ..json_types import type_name

# Why a choice (and its `message`) is no answer, or None: each family's own rule.
Unusable = Callable[[dict[str, Any], Any], str | None]


def saved_answer(body: dict[str, Any], field: str, unusable: Unusable
                 ) -> tuple[dict[str, Any], str | None]:
    """The body with its choices in index order and indexed 0..n-1 (itself when they are:
    the usual case is not copied), each checked for shape and for its `field`; and why
    its choices are not an answer (the first reason, in that order), or None."""
    choices = body.get("choices", MISSING)
    if type(choices) is not list:
        choices = want("choices", choices, list)
    in_order = True
    choice: Any = None
    for i, choice in enumerate(choices):
        if type(choice) is not dict and not isinstance(choice, dict):
            break
        index = choice.get("index")
        if index != i or type(index) is not int:  # (an index `false` is no 0)
            in_order = False
    if not choices or type(choice) is not dict and not isinstance(choice, dict):
        raise BadAnswer("choices", "expected a non-empty list of choice objects")
    if not in_order and len(choices) > 1 and all(isinstance(c.get("index"), int)
                                                 for c in choices):
        choices = sorted(choices, key=lambda c: c["index"])
    reason = None  # the first, in sorted order, of the reasons why a choice is no answer
    for i, choice in enumerate(choices):
        if field not in choice:
            raise BadAnswer(f"choices[{i}].{field}", "missing")
        message = choice.get("message")
        if type(message) is dict or isinstance(message, dict):
            _check_message(message, f"choices[{i}].message")
        why = unusable(choice, message)
        if why is not None and (reason is None or why < reason):
            reason = why
    if in_order and choices is body["choices"]:
        return body, reason
    return {**body, "choices": [{**c, "index": i} for i, c in enumerate(choices)]}, reason


# The shape of each answer field of a message, checked when a record is read.
_MESSAGE_SHAPES: dict[str, tuple[tuple[type, ...], str]] = {
    "content": ((str, list), "a string, a list of content parts or null"),
    "refusal": ((str,), "a string or null"),
    "reasoning": ((str,), "a string or null"),
    "reasoning_content": ((str,), "a string or null"),
    "tool_calls": ((list,), "a list of tool-call objects or null"),
    "function_call": ((dict,), "an object or null"),
    "role": ((str,), "a string"),
}
_MESSAGE_TYPES = {name: types for name, (types, _) in _MESSAGE_SHAPES.items()}
_NOT_TEXT = frozenset({"tool_calls", "function_call"})  # the fields a string is wrong in


def _check_message(message: dict[str, Any], at: str) -> None:
    for name, value in message.items():
        if value is None or type(value) is str and name not in _NOT_TEXT:
            continue
        types = _MESSAGE_TYPES.get(name)
        if types is not None and not isinstance(value, types):
            break
    else:
        calls = message.get("tool_calls")
        if calls and not all(isinstance(c, dict) and isinstance(c.get("function", {}), dict)
                             for c in calls):
            raise BadAnswer(f"{at}.tool_calls", "expected a list of tool-call objects, each "
                            "with a `function` object")
        return
    for name, (types, words) in _MESSAGE_SHAPES.items():  # the first in this order is named
        value = message.get(name)
        if value is not None and not isinstance(value, types):
            raise BadAnswer(f"{at}.{name}", f"expected {words}, got {type_name(value)}")


def samples(body: dict[str, Any]) -> int:
    """How many samples a saved body holds: one per choice."""
    return len(body["choices"])


def generations(body: dict[str, Any]) -> list[bytes]:
    """One generation per choice: the whole saved choice but its index (text, reasoning
    under whichever name, tool calls, refusal, logprobs, finish_reason and any other
    field)."""
    return [generation_id({k: v for k, v in c.items() if k != "index"})
            for c in body["choices"]]
