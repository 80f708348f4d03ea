"""A chat answer streamed: the deltas of one saved choice, as vLLM/OpenAI send them (the
frames are made in `choices/stream_out.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..choices.stream_out import MARK, ChoicesStream, Delta, Run
from ..pieces import first_piece

_REASONING = ("reasoning", "reasoning_content")


def _pieces(name: str, text: str) -> Run:
    """`text` in small deltas, each `{"delta": {name: piece}}`."""
    return Run(name, {"delta": {name: MARK}}, text)


def _token_entries(text: str, logprobs: Any) -> list[dict[str, Any]] | None:
    """The saved logprob entries when their tokens spell out `text` exactly."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("token"), str) for e in entries):
        return None
    return entries if "".join(e["token"] for e in entries) == text else None


def _content(content: str, logprobs: Any) -> Iterator[Delta]:
    entries = _token_entries(content, logprobs)
    if entries is not None:
        assert isinstance(logprobs, dict)
        for n, entry in enumerate(entries):  # the other lists (refusal) go with the first
            yield {"delta": {"content": entry["token"]},
                   "logprobs": {**logprobs, "content": [entry]} if n == 0 else {"content": [entry]}}
        return
    if logprobs is not None:  # logprobs that do not spell it: with the first piece
        first = first_piece(content)
        yield {"delta": {"content": first}, "logprobs": logprobs}
        content = content[len(first):]
    yield _pieces("content", content)


def _tool_calls(calls: list[Any]) -> Iterator[Delta]:
    """Each call opens with its id, type, name and first piece of arguments; then the rest
    of its arguments, piece by piece."""
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str) or not isinstance(function, dict):
            yield {"delta": {"tool_calls": [{**call, "index": i}]}}
            continue
        first = first_piece(arguments)
        yield {"delta": {"tool_calls": [
            {**call, "index": i, "function": {**function, "arguments": first}}]}}
        marked = {"delta": {"tool_calls": [{"index": i, "function": {"arguments": MARK}}]}}
        yield Run(("tool_call", i), marked, arguments[len(first):])


def deltas(choice: dict[str, Any]) -> Iterator[Delta]:
    """A role delta, reasoning deltas, content deltas (with their logprobs), refusal,
    tool-call deltas (the call, then its arguments piece by piece)."""
    message = choice.get("message") or {}
    yield {"delta": {"role": message.get("role") or "assistant", "content": ""}}
    for name in _REASONING:
        if message.get(name):
            yield _pieces(name, message[name])
    content = message.get("content")
    if content and isinstance(content, str):
        yield from _content(content, choice.get("logprobs"))
    elif content:
        yield {"delta": {"content": content}, "logprobs": choice.get("logprobs")}
    elif choice.get("logprobs") is not None:
        yield {"delta": {}, "logprobs": choice.get("logprobs")}
    if message.get("refusal"):
        yield _pieces("refusal", message["refusal"])
    elif message.get("refusal") is not None:
        yield {"delta": {"refusal": message["refusal"]}}
    if message.get("function_call") is not None:
        yield {"delta": {"function_call": message["function_call"]}}
    calls = message.get("tool_calls")
    if calls:
        yield from _tool_calls(calls)


STREAM = ChoicesStream("chat.completion.chunk", deltas, {"delta": {}})
