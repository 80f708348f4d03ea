"""The OpenAI-shaped answers of inspect_ai's model calls (`openai-api/`, `openai/`, and any
provider on the openai SDK), as their servers sent them.

`call.response` is the openai SDK's `model_dump()` of the response: the raw body plus a
few SDK-only null fields, dropped here for chat (`raw_chat`; for a streamed call, the
SDK's aggregate); a Responses API call's is the SDK's dump of the `Response` (every field
the SDK knows, null where the server sent none; `raw_responses`). A chat call saved
without `call.response` is rebuilt from the event's `output` (`from_output`).
"""

from __future__ import annotations

import json
from typing import Any

from ...paths import CHAT_PATH
from .base import synthetic_id, text_response


def raw_chat(response: dict[str, Any], streamed: bool) -> dict[str, Any]:
    """`call.response` without what only the openai SDK adds: null `metadata`,
    `moderation`, `parsed`, `parsed_arguments`, and a stream's tool-call `index`."""
    body = {k: v for k, v in response.items()
            if not (k in ("metadata", "moderation") and v is None)}
    body["choices"] = [_raw_choice(c, streamed) if isinstance(c, dict) else c
                       for c in body["choices"]]
    return body


def raw_responses(response: dict[str, Any]) -> dict[str, Any]:
    """`call.response` of a Responses API call: the SDK's dump keeps every field it knows
    (null where the server sent none, left as they are: clients read them the same), and
    holds `created_at` as a float, which servers send as an integer."""
    body = dict(response)
    for name in ("created_at", "completed_at"):
        value = body.get(name)
        if isinstance(value, float) and value.is_integer():
            body[name] = int(value)
    return body


def _raw_choice(choice: dict[str, Any], streamed: bool) -> dict[str, Any]:
    message = choice.get("message")
    if not isinstance(message, dict):
        return choice
    message = {k: v for k, v in message.items() if not (k == "parsed" and v is None)}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [_raw_tool_call(c, streamed) if isinstance(c, dict) else c
                                 for c in calls]
    return {**choice, "message": message}


def _raw_tool_call(call: dict[str, Any], streamed: bool) -> dict[str, Any]:
    call = {k: v for k, v in call.items() if not (streamed and k == "index")}
    function = call.get("function")
    if isinstance(function, dict):
        call["function"] = {k: v for k, v in function.items()
                            if not (k == "parsed_arguments" and v is None)}
    return call


def from_output(output: Any, seed: str) -> dict[str, Any] | None:
    """A chat.completion body rebuilt from inspect's ModelOutput (no raw response saved)."""
    if not isinstance(output, dict) or not isinstance(output.get("choices"), list):
        return None
    choices = [c for c in output["choices"] if isinstance(c, dict)]
    if not choices:
        return None
    parts = [_output_message(c) for c in choices]
    return text_response(
        CHAT_PATH, [p[0] for p in parts],
        [FINISH.get(str(c.get("stop_reason"))) for c in choices],
        _output_usage(output.get("usage")),
        id=output.get("response_id") or synthetic_id("inspect", seed),
        model=output.get("model"), reasonings=[p[1] for p in parts],
        tool_calls=[p[2] for p in parts])


FINISH = {"stop": "stop", "tool_calls": "tool_calls", "content_filter": "content_filter",
          "max_tokens": "length", "model_length": "length"}


def _output_message(choice: dict[str, Any]) -> tuple[Any, str | None, list[Any] | None]:
    """(content, reasoning, tool calls) of a ModelOutput choice, in the OpenAI shape."""
    saved: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
    content = saved.get("content")
    reasoning = None
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        texts = [p.get("text") for p in parts if p.get("type") == "text"]
        thoughts = [p.get("reasoning") for p in parts
                    if p.get("type") == "reasoning" and not p.get("redacted")]
        content = "\n".join(t for t in texts if isinstance(t, str))
        if thoughts:
            reasoning = "\n".join(t for t in thoughts if isinstance(t, str))
    calls = saved.get("tool_calls")
    tool_calls = None
    if isinstance(calls, list) and calls:
        # inspect keeps the parsed arguments only: they are serialised again here.
        tool_calls = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c.get("function"), "arguments": json.dumps(c.get("arguments"))}}
            for c in calls if isinstance(c, dict)]
    return content, reasoning, tool_calls


def _output_usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(k) for k in ("input_tokens", "output_tokens", "total_tokens")]
    prompt, completion, total = (c if isinstance(c, int) else -1 for c in counts)
    if min(prompt, completion, total) < 0:
        return None
    cached = sum(usage.get(k) or 0 for k in ("input_tokens_cache_read",
                                              "input_tokens_cache_write"))
    out: dict[str, Any] = {"prompt_tokens": prompt + cached, "completion_tokens": completion,
                           "total_tokens": total}
    if isinstance(usage.get("reasoning_tokens"), int):
        out["completion_tokens_details"] = {"reasoning_tokens": usage["reasoning_tokens"]}
    return out
